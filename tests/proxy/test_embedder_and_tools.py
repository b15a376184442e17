"""The embed-backend choice when a backend is down, and `pion serve-tools` (replay, generate-qa).

Real processes throughout: pion-server, pion-serve, the OpenAI-compatible and SIE test
servers from ``support.fake_backends``; the tools run as ``python -m pion.cli serve-tools``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pion.proxy.tools.generate_qa import chunks_of, questions_in
from support.fake_backends import FakeBackend
from support.procs import ServerProcess, free_port
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder


def _ask(proxy: ProxyProcess, question: str, system: str) -> tuple[str, dict]:
    raw = proxy.openai().chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    return raw.headers["x-pion-cache"], raw.parse().model_extra["x_pion"]


def test_explicit_sie_that_is_down_serves_uncached_never_falls_through_and_reports_degraded(
        shared_pion_server: ServerProcess, fake_openai: FakeBackend, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    p = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url, "--embed-backend", "sie",
                    "--sie-url", dead, *pion_args(shared_pion_server))
    try:
        assert httpx.get(p.url + "/health").json() == {"status": "ok"}
        for _ in range(2):
            header, x = _ask(p, "How do I reset my password?", "sie-down")
            assert (header, x["source"]) == ("BYPASS", "full_inference")
        health = httpx.get(p.url + "/health").json()
        assert health["status"] == "degraded"
        assert [r.split(":")[0] for r in health["reasons"]] == ["embedder sie"]
        assert p.stats()["embedder"]["calls"] == {"sie": 0, "ollama": 0, "pion": 0}
        assert p.log().count("embed backend sie failed, serving uncached") == 1  # once per outage
    finally:
        p.stop()


@pytest.mark.slow  # the server loads MiniLM
def test_auto_with_a_sie_url_uses_pion_server_while_it_embeds(shared_pion_server: ServerProcess,
                                                              fake_openai: FakeBackend, tmp_path: Path) -> None:
    p = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url, "--sie-url",
                    f"http://127.0.0.1:{free_port()}", *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        _ask(p, "What are your opening hours?", "auto-sie")
        stats = p.stats()["embedder"]
        assert (stats["backend"], stats["calls"]["sie"], stats["calls"]["pion"] >= 1) == ("pion", 0, True)
    finally:
        p.stop()


@pytest.mark.slow  # the server loads MiniLM
def test_replay_logs_every_query_and_prints_a_summary(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
                                                      tmp_path: Path) -> None:
    p = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url, *pion_args(shared_pion_server))
    data = tmp_path / "qa.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "question": "How do I reset my password?", "family": "pw"},
        {"id": "b", "question": "How can I reset my password?", "family": "pw"},
        {"id": "c", "question": "What is the capital of France?", "family": "geo"},
    ]) + "\n")
    out = tmp_path / "replay.jsonl"
    try:
        wait_for_embedder(p)
        proc = subprocess.run([sys.executable, "-m", "pion.cli", "serve-tools", "replay", str(data), "--url", p.url,
                               "--model", "fake-model", "--system", "replay-test", "--out", str(out)],
                              capture_output=True, text=True, timeout=120)
    finally:
        p.stop()
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["family"], r["status"], r["cache"], r["source"]) for r in rows] == [
        ("a", "pw", 200, "MISS", "full_inference"), ("b", "pw", 200, "HIT", "l1_cache"),
        ("c", "geo", 200, "MISS", "full_inference")]
    assert rows[1]["answer"] == rows[0]["answer"]
    table = proc.stdout.splitlines()
    assert table[0] == "| source | queries | share | p50 ms | p95 ms |"
    assert [line.split(" | ")[:3] for line in table[2:4]] == [["| full_inference", "2", "66.7%"],
                                                               ["| l1_cache", "1", "33.3%"]]
    assert table[4] == "| **served from cache** | 1 | 33.3% | | |"


def test_replay_of_a_row_without_a_question_names_the_line(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"question": "ok?"}\n{"q": ""}\n')
    proc = subprocess.run([sys.executable, "-m", "pion.cli", "serve-tools", "replay", str(data)],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.strip()) == (1, f"pion serve-tools: {data}:2: no 'question' string")


def test_questions_are_taken_from_reply_lines_ending_in_a_question_mark() -> None:
    reply = "Here you go:\n1. How do I reset it?\n- What does it cost?\nQ3: Why?\n2) Where is the office located?"
    assert questions_in(reply) == ["How do I reset it?", "What does it cost?", "Where is the office located?"]


def test_documents_are_cut_into_paragraph_aligned_chunks() -> None:
    text = "\n\n".join(["a" * 500, "b" * 500, "c" * 500])
    assert [len(c) for c in chunks_of(text, chunk_chars=1100)] == [1002, 500]


def test_generate_qa_asks_the_backend_per_chunk_without_touching_the_cache(fake_openai: FakeBackend,
                                                                           tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    # The test server echoes the prompt, so the questions found are the ones the chunk holds.
    (docs / "faq.md").write_text("How do I reset my password?\nOpen Settings and click Reset.\n\n"
                                 "What are the opening hours?\nWe are open 9 to 5.\n")
    out = tmp_path / "qa.jsonl"
    proc = subprocess.run([sys.executable, "-m", "pion.cli", "serve-tools", "generate-qa", str(docs), "--url",
                           fake_openai.url, "--model", "fake-model", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [
        {"id": "gen-0000", "question": "How do I reset my password?", "family": "faq.md#0", "source": "faq.md"},
        {"id": "gen-0001", "question": "What are the opening hours?", "family": "faq.md#0", "source": "faq.md"}]
    assert fake_openai.state.last_headers["cache-control"] == "no-cache, no-store"
    assert fake_openai.state.last_body["model"] == "fake-model"


def test_generate_qa_fails_with_the_reason_when_the_replies_hold_no_questions(fake_openai: FakeBackend,
                                                                              tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    # The test server echoes the prompt: a chunk without questions gives a reply without any, as
    # SmolLM2-135M's replies were (it summarised the text instead).
    (docs / "notes.md").write_text("Open Settings and click Reset.\n\nWe are open 9 to 5.\n")
    proc = subprocess.run([sys.executable, "-m", "pion.cli", "serve-tools", "generate-qa", str(docs), "--url",
                           fake_openai.url, "--model", "tiny-model"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr.strip()) == (
        1, "", "pion serve-tools: generate-qa: the backend's replies held no questions (no line ending in '?'); "
        "'tiny-model' may be too small to follow the instruction")


def test_generate_qa_on_a_folder_without_documents_fails_with_the_reason(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pion.cli", "serve-tools", "generate-qa", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.strip()) == (1, f"pion serve-tools: {tmp_path}: no .md or .txt files")
