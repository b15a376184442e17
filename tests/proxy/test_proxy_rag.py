"""pion-serve --rag-index end to end: `pion rag ingest` builds the index in a real pion-server,
the openai SDK asks pion-serve, and the OpenAI-compatible test backend records the prompt it
was sent (so the injected context can be checked word for word). The slow test at the end
uses the real pion-llm (SmolLM2) and a fact no model can know."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pion.proxy.rag import TEMPLATE, RagDocument, inject, rag_scope
from pion.proxy.rag_ingest import ingest
from pion.proxy.scope import ScopeKey
from support.fake_backends import FakeBackend
from support.llm_procs import MODEL, start_llm
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder

FACTS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "rag_facts"
CORPUS = [str(FACTS / f"{name}.md") for name in ("products", "places", "people", "company")]


@pytest.fixture(scope="module")
def kb(shared_pion_server: ServerProcess) -> str:
    """The made-up facts, ingested one fact per chunk into index ``kb``."""
    r = shared_pion_server.client()
    if b"kb" not in r.execute_command("FT._LIST"):
        # 40 facts, one per paragraph; the handbook's heading is too long to share a chunk
        assert ingest(r, "kb", CORPUS, max_chars=120, progress=False) == 41
    return "kb"


@pytest.fixture(scope="module")
def rag_proxy(shared_pion_server: ServerProcess, fake_openai: FakeBackend, kb: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    p = start_proxy(tmp_path_factory.mktemp("proxy"), "--backend", "vllm", "--backend-url", fake_openai.url,
                    "--rag-index", kb, "--rag-k", "2", *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        yield p
    finally:
        p.stop()


def ask(proxy: ProxyProcess, messages: list[dict[str, str]]) -> tuple[str, str, dict]:
    raw = proxy.openai().chat.completions.with_raw_response.create(model="fake-model", messages=messages)
    completion = raw.parse()
    return completion.choices[0].message.content or "", raw.headers["x-pion-cache"], completion.model_extra["x_pion"]


def test_inject_adds_a_system_message_or_extends_the_existing_one() -> None:
    docs = [RagDocument("d:1", 0.1, "Fact one."), RagDocument("d:2", 0.2, "Fact two.")]
    context = TEMPLATE.format(documents="[1] Fact one.\n[2] Fact two.")
    user = {"role": "user", "content": "q"}
    assert inject([user], docs) == [{"role": "system", "content": context}, user]
    system = {"role": "system", "content": "Be brief."}
    assert inject([system, user], docs) == [{"role": "system", "content": f"Be brief.\n\n{context}"}, user]
    assert inject([user], []) == [user]


def test_rag_scope_differs_per_index_and_from_the_plain_scope() -> None:
    plain = ScopeKey("abc")
    assert len({plain, rag_scope(plain, "kb"), rag_scope(plain, "other")}) == 3
    assert rag_scope(plain, "kb") == rag_scope(plain, "kb")


def test_top_k_documents_are_prepended_and_listed_in_x_pion(rag_proxy: ProxyProcess,
                                                           fake_openai: FakeBackend) -> None:
    before = rag_proxy.stats()["rag_injections"]
    _, header, x = ask(rag_proxy, [{"role": "user", "content": "What is the product code of the Brisalt blender?"}])
    sent = fake_openai.state.last_body["messages"]
    assert header == "MISS"
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[0]["content"].startswith(TEMPLATE.split("{documents}")[0])
    assert "[1] The Brisalt blender is listed with the product code BB-3146." in sent[0]["content"]
    assert len(x["rag"]) == 2
    assert all(set(doc) == {"id", "score"} and doc["id"].startswith("kb:") for doc in x["rag"])
    stats = rag_proxy.stats()
    assert (stats["rag_index"], stats["rag_injections"]) == ("kb", before + 1)


def test_an_existing_system_prompt_keeps_its_place_with_the_context_after_it(
        rag_proxy: ProxyProcess, fake_openai: FakeBackend) -> None:
    ask(rag_proxy, [{"role": "system", "content": "You answer in one sentence."},
                    {"role": "user", "content": "Who designed the Pellacorn toaster?"}])
    sent = fake_openai.state.last_body["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[0]["content"].startswith("You answer in one sentence.\n\nAnswer the user's question")
    assert "Ilse Varnholt" in sent[0]["content"]


@pytest.mark.slow  # the server loads MiniLM
def test_answers_made_with_one_index_are_not_served_through_another(
        shared_pion_server: ServerProcess, fake_openai: FakeBackend, rag_proxy: ProxyProcess, kb: str,
        tmp_path: Path) -> None:
    question = [{"role": "user", "content": "What is the capital of Velmora?"}]
    ask(rag_proxy, question)
    _, again, _ = ask(rag_proxy, question)
    assert again == "HIT"
    r = shared_pion_server.client()
    if b"kb2" not in r.execute_command("FT._LIST"):
        ingest(r, "kb2", CORPUS[:1], max_chars=120, progress=False)
    other = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url, "--rag-index", "kb2",
                        *pion_args(shared_pion_server))
    try:
        wait_for_embedder(other)
        _, header, x = ask(other, question)
        assert (header, x["source"]) == ("MISS", "full_inference")
    finally:
        other.stop()


@pytest.mark.slow  # the server loads MiniLM
def test_a_missing_index_sends_the_request_without_context_and_says_why(
        shared_pion_server: ServerProcess, fake_openai: FakeBackend, tmp_path: Path) -> None:
    proxy = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url,
                        "--rag-index", "no_such_index", *pion_args(shared_pion_server))
    try:
        wait_for_embedder(proxy)
        answer, _, x = ask(proxy, [{"role": "user", "content": "Where is the Brannock bridge?"}])
        assert answer.endswith("Where is the Brannock bridge?")
        assert fake_openai.state.last_body["messages"] == [{"role": "user", "content": "Where is the Brannock bridge?"}]
        assert (x["rag"], x["rag_error"]) == ([], "no_such_index: no such index")
        assert proxy.stats()["rag_injections"] == 0
    finally:
        proxy.stop()


@pytest.mark.slow  # the server loads MiniLM
def test_pion_rag_ingest_cli_indexes_files_and_rerunning_overwrites(shared_pion_server: ServerProcess,
                                                                   tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nThe Frobnitz valve opens at 12 bar.\n\nIt closes at 3 bar.\n")
    (docs / "sub" / "b.txt").write_text("Gizmo sprockets are painted teal.")
    (docs / "ignored.bin").write_bytes(b"\x00\x01")
    cmd = [sys.executable, "-m", "pion.cli", "rag", "ingest", "clidocs", str(docs), "--port",
           str(shared_pion_server.port), "--chunk-chars", "40"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "3 chunks indexed in clidocs"
    assert "ingest clidocs" in first.stderr  # the progress bar
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0
    r = shared_pion_server.client()
    info = r.execute_command("FT.INFO", "clidocs")
    assert dict(zip(info[0::2], info[1::2], strict=True))[b"num_docs"] == 3
    found = r.execute_command("FT.SEARCH", "clidocs", "teal", "RETURN", "1", "source")
    assert found[0] == 1
    assert found[2] == [b"source", str(docs / "sub" / "b.txt").encode()]
    missing = subprocess.run([*cmd[:5], "clidocs", str(tmp_path / "nope"), "--port", str(shared_pion_server.port)],
                             capture_output=True, text=True, timeout=60)
    assert (missing.returncode, missing.stderr.strip()) == (
        1, f"pion rag ingest: no such file or directory: {tmp_path / 'nope'}")


@pytest.mark.slow
def test_pion_llm_answers_a_made_up_fact_only_with_rag(shared_pion_server: ServerProcess, kb: str,
                                                       tmp_path: Path) -> None:
    llm = start_llm(tmp_path / "llm", "--no-pion")
    try:
        with_rag = start_proxy(tmp_path / "rag", "--backend-url", llm.url, "--rag-index", kb, "--rag-k", "1",
                               "--no-cache", *pion_args(shared_pion_server))
        plain = start_proxy(tmp_path / "plain", "--backend-url", llm.url, "--no-cache",
                            *pion_args(shared_pion_server))
        try:
            question = [{"role": "user", "content": "What is the product code of the Olvenmark backpack?"}]
            kw = {"model": MODEL, "max_tokens": 40, "temperature": 0.0}
            answer = with_rag.openai().chat.completions.create(messages=question, **kw)  # type: ignore[arg-type]
            baseline = plain.openai().chat.completions.create(messages=question, **kw)  # type: ignore[arg-type]
            assert "OB-8812" in (answer.choices[0].message.content or "")
            assert "OB-8812" not in (baseline.choices[0].message.content or "")
            assert json.dumps(answer.model_extra["x_pion"]["rag"][0]["id"]).startswith('"kb:')
        finally:
            with_rag.stop()
            plain.stop()
    finally:
        llm.stop()
