"""pion-serve end to end: the official openai SDK -> pion-serve -> OpenAI-compatible backend.

The backend is the small OpenAI-compatible test server (pion-llm is not started here);
the L1 cache lives in a real pion-server. Each test uses its own system prompt, so its
entries live in their own scope of the shared cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder
from support.fake_backends import FakeBackend
from support.procs import ServerProcess, free_port, start_server

pytestmark = pytest.mark.slow  # the proxy waits for the server to load MiniLM


@pytest.fixture(scope="module")
def proxy(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    p = start_proxy(tmp_path_factory.mktemp("proxy"), "--backend", "vllm", "--backend-url", fake_openai.url,
                    *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        yield p
    finally:
        p.stop()


def ask(proxy: ProxyProcess, question: str, system: str, model: str = "fake-model", **kw: object) -> tuple[str, str, dict]:
    """(answer, X-Pion-Cache header, x_pion) for one non-streaming request."""
    raw = proxy.openai().chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "system", "content": system}, {"role": "user", "content": question}], **kw)
    completion = raw.parse()
    return completion.choices[0].message.content or "", raw.headers["x-pion-cache"], completion.model_extra["x_pion"]


def test_paraphrase_is_served_from_the_cache_with_the_first_answer(proxy: ProxyProcess, fake_openai: FakeBackend) -> None:
    first, h1, x1 = ask(proxy, "How do I reset my password?", "paraphrase")
    calls = fake_openai.state.calls
    second, h2, x2 = ask(proxy, "How can I reset my password?", "paraphrase")
    assert (h1, x1["source"]) == ("MISS", "full_inference")
    assert (h2, x2["source"]) == ("HIT", "l1_cache")
    assert second == first
    assert fake_openai.state.calls == calls
    assert x2["similarity"] >= 0.85


def test_unrelated_question_goes_to_the_backend(proxy: ProxyProcess) -> None:
    ask(proxy, "What is the capital of France?", "unrelated")
    answer, header, x = ask(proxy, "How do vaccines work?", "unrelated")
    assert header == "MISS"
    assert x["source"] == "full_inference"
    assert answer.endswith("How do vaccines work?")


@pytest.mark.parametrize("cached, trap", [
    ("What is the status of order 48213?", "What is the status of order 48231?"),
    ("Is this mushroom safe to eat?", "Is this mushroom unsafe to eat?"),
    ("Is the store open on Sunday?", "Is the store open on Monday?"),
    ("How do I install numpy?", "How do I install numpy on Windows?"),
])
def test_near_identical_trap_is_not_served_someone_elses_answer(proxy: ProxyProcess, cached: str, trap: str) -> None:
    system = f"trap {cached}"
    ask(proxy, cached, system)
    answer, header, x = ask(proxy, trap, system)
    assert header == "MISS"
    assert answer.endswith(trap)
    assert x["similarity"] >= 0.85  # cosine alone would have served it


def test_scope_isolation_by_system_prompt_model_and_earlier_turns(proxy: ProxyProcess) -> None:
    q = "What are your opening hours?"
    ask(proxy, q, "scope-A")
    assert ask(proxy, q, "scope-A")[1] == "HIT"
    assert ask(proxy, q, "scope-B")[1] == "MISS"
    assert ask(proxy, q, "scope-A", model="other-model")[1] == "MISS"
    client = proxy.openai()
    history = [{"role": "system", "content": "scope-A"}, {"role": "user", "content": "Hi, I'm in Berlin."},
               {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": q}]
    raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=history)
    assert raw.headers["x-pion-cache"] == "MISS"
    raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=history)
    assert raw.headers["x-pion-cache"] == "HIT"


def _stream(proxy: ProxyProcess, question: str, system: str) -> tuple[str, list, str]:
    with proxy.openai().chat.completions.with_streaming_response.create(
            model="fake-model", stream=True,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}]) as resp:
        header = resp.headers["x-pion-cache"]
        chunks = list(resp.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks, header


def test_streaming_miss_is_stored_and_a_streaming_hit_replays_it(proxy: ProxyProcess) -> None:
    text1, chunks1, h1 = _stream(proxy, "How do I track my package?", "stream")
    text2, chunks2, h2 = _stream(proxy, "How can I track my package?", "stream")
    assert (h1, h2) == ("MISS", "HIT")
    assert text2 == text1
    assert chunks2[-1].choices[0].finish_reason == "stop"
    assert chunks2[-1].model_extra["x_pion"]["source"] == "l1_cache"
    assert chunks1[-1].model_extra["x_pion"]["source"] == "full_inference"
    answer, header, _ = ask(proxy, "How can I track my package?", "stream")
    assert (answer, header) == (text1, "HIT")


def test_stream_miss_and_hit_are_chunk_sse_ending_with_done_marker(proxy: ProxyProcess) -> None:
    body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "sse raw check"}]}
    for expected in ("MISS", "HIT"):
        r = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
        assert (r.headers["content-type"].split(";")[0], r.headers["x-pion-cache"]) == ("text/event-stream", expected)
        events = [e for e in r.text.split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events)
        assert events[-1] == "data: [DONE]"
        chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        assert len({c["id"] for c in chunks}) == 1
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_cache_control_no_cache_skips_lookup_and_no_store_skips_storing(proxy: ProxyProcess) -> None:
    ask(proxy, "Where can I find my invoice?", "cc")
    client = proxy.openai()
    msgs = [{"role": "system", "content": "cc"}, {"role": "user", "content": "Where can I find my invoice?"}]
    raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=msgs,
                                                           extra_headers={"Cache-Control": "no-cache"})
    assert raw.headers["x-pion-cache"] == "BYPASS"
    raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=msgs,
                                                           extra_body={"cache": {"no-cache": True}})
    assert raw.headers["x-pion-cache"] == "BYPASS"
    msgs2 = [{"role": "system", "content": "cc"}, {"role": "user", "content": "What is the warranty period?"}]
    client.chat.completions.create(model="fake-model", messages=msgs2, extra_headers={"Cache-Control": "no-store"})
    raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=msgs2)
    assert raw.headers["x-pion-cache"] == "MISS"


def test_answers_with_tool_calls_length_finish_or_n_above_one_are_not_cached(proxy: ProxyProcess) -> None:
    for q in ("Look this up [tool]", "Write a long essay [length]"):
        ask(proxy, q, "nocache")
        assert ask(proxy, q, "nocache")[1] == "MISS"
    ask(proxy, "Tell me a joke", "nocache-n", n=2)
    assert ask(proxy, "Tell me a joke", "nocache-n", n=2)[1] == "BYPASS"


def test_backend_error_status_passes_through_and_is_not_cached(proxy: ProxyProcess) -> None:
    client = proxy.openai()
    msgs = [{"role": "user", "content": "please fail [error]"}]
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model="fake-model", messages=msgs)
        assert info.value.status_code == 500
        assert info.value.body["message"] == "fake overload"
        assert (info.value.response.headers["x-pion-cache"], info.value.response.json()["x_pion"]["source"]) == (
            "MISS", "full_inference")


@pytest.mark.parametrize("body, message", [
    (b"{not json", "request body is not valid JSON"),
    (b"[1, 2]", "request body must be a JSON object"),
    (b'{"model": "m"}', "'messages' is required and must be a non-empty array"),
    (b'{"model": "m", "messages": []}', "'messages' is required and must be a non-empty array"),
    (b'{"model": "m", "messages": [{"content": "x"}]}', "messages[0] must be an object with a 'role'"),
    (b'{"messages": [{"role": "user", "content": "x"}]}', "'model' is required"),
])
def test_malformed_request_gets_openai_shaped_400(proxy: ProxyProcess, body: bytes, message: str) -> None:
    r = httpx.post(proxy.url + "/v1/chat/completions", content=body,
                   headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == message
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert r.headers["x-pion-cache"] == "BYPASS"


def test_models_are_proxied_and_client_authorization_passes_through(proxy: ProxyProcess,
                                                                    fake_openai: FakeBackend) -> None:
    models = proxy.openai().models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    assert fake_openai.state.last_headers["authorization"] == "Bearer sk-test-client"


def test_health_stats_and_metrics_report_the_traffic(proxy: ProxyProcess) -> None:
    assert httpx.get(proxy.url + "/health").json() == {"status": "ok"}
    before = proxy.stats()
    ask(proxy, "How do I delete my account?", "stats")
    ask(proxy, "How can I delete my account?", "stats")
    stats = proxy.stats()
    assert stats["total_requests"] == before["total_requests"] + 2
    assert stats["l1_cache_hits"] == before["l1_cache_hits"] + 1
    assert stats["full_inference"] == before["full_inference"] + 1
    assert (stats["backend"], stats["cache_enabled"], stats["distill_enabled"]) == ("vllm", True, False)
    assert stats["cost_savings_pct"] == round(stats["l1_cache_hits"] / stats["total_requests"] * 100, 2)
    assert stats["embedder"]["backend"] == "pion"
    assert set(stats) >= {"l1_hit_rate", "l3_synthesis", "full_inference_rate", "avg_latency_ms", "rag_index",
                          "l3_concepts", "intent_router"}
    metrics = httpx.get(proxy.url + "/metrics").text
    assert 'pion_serve_cache_hits_total{layer="l1"}' in metrics
    assert "pion_serve_lookup_similarity_bucket" in metrics
    assert 'pion_serve_backend_latency_seconds_count{backend="vllm"}' in metrics


SPEC_STATS_KEYS = ["total_requests", "l1_cache_hits", "l3_synthesis", "l3_direct", "l3_composite", "full_inference",
                   "l1_hit_rate", "l3_synthesis_rate", "full_inference_rate", "cost_savings_pct", "rag_injections",
                   "avg_latency_ms", "backend", "model", "cache_enabled", "distill_enabled", "rag_index", "embedder",
                   "l3_concepts", "l3_fragments", "intent_router", "mlx_gpu", "v_store", "l1_verdicts"]


def test_stats_document_is_exactly_the_spec_schema_with_later_layers_zero_or_null(
        proxy: ProxyProcess, shared_pion_server: ServerProcess) -> None:
    ask(proxy, "Is the stats schema exact?", "schema")
    stats = proxy.stats()
    assert list(stats) == SPEC_STATS_KEYS
    counts = ["total_requests", "l1_cache_hits", "l3_synthesis", "l3_direct", "l3_composite", "full_inference",
              "rag_injections"]
    assert [type(stats[k]) for k in counts] == [int] * len(counts)
    rates = ["l1_hit_rate", "l3_synthesis_rate", "full_inference_rate", "cost_savings_pct", "avg_latency_ms"]
    assert [type(stats[k]) for k in rates] == [float] * len(rates)
    later = {k: stats[k] for k in ["l3_synthesis", "l3_direct", "l3_composite", "l3_synthesis_rate", "rag_injections",
                                   "distill_enabled", "rag_index", "l3_concepts", "l3_fragments", "intent_router",
                                   "mlx_gpu"]}
    assert later == {"l3_synthesis": 0, "l3_direct": 0, "l3_composite": 0, "l3_synthesis_rate": 0.0,
                     "rag_injections": 0, "distill_enabled": False, "rag_index": None, "l3_concepts": None,
                     "l3_fragments": None, "intent_router": None, "mlx_gpu": None}
    # v_store: the connected pion-server and its PION.STATS receipt (the fields redis-py sees)
    server_fields = shared_pion_server.client(protocol=3).execute_command("PION.STATS")
    v_store = stats["v_store"]
    assert (v_store["host"], v_store["port"], v_store["connected"], v_store["error"]) == (
        "127.0.0.1", shared_pion_server.port, True, None)
    assert sorted(v_store["pion_stats"]) == sorted(k.decode() if isinstance(k, bytes) else k for k in server_fields)
    assert (stats["backend"], stats["model"], stats["cache_enabled"]) == ("vllm", None, True)
    assert stats["embedder"] == {"backend": "pion", "sie_url": None, "sie_model": "BAAI/bge-small-en-v1.5",
                                 "calls": {"sie": 0, "ollama": 0, "pion": stats["embedder"]["calls"]["pion"]}}
    assert stats["cost_savings_pct"] == round(stats["l1_hit_rate"] * 100, 2)


def _metric(proxy: ProxyProcess, name: str) -> float:
    for line in httpx.get(proxy.url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing from /metrics")


def test_similarity_histogram_and_x_pion_cover_misses_below_the_threshold(proxy: ProxyProcess) -> None:
    before = (_metric(proxy, "pion_serve_lookup_similarity_count"), _metric(proxy, "pion_serve_cache_lookups_total"))
    first = ask(proxy, "How do I export my data to CSV?", "histogram")
    unrelated = ask(proxy, "What is the capital of Australia?", "histogram")
    after = (_metric(proxy, "pion_serve_lookup_similarity_count"), _metric(proxy, "pion_serve_cache_lookups_total"))
    assert (first[1], "similarity" in first[2]) == ("MISS", False)  # empty scope: nothing to compare
    assert unrelated[1] == "MISS"
    assert 0.0 < unrelated[2]["similarity"] < 0.85
    assert (after[0] - before[0], after[1] - before[1]) == (1, 2)


def test_a_miss_embeds_the_question_once_on_the_server(proxy: ProxyProcess,
                                                       shared_pion_server: ServerProcess) -> None:
    def embedded() -> int:
        return int(shared_pion_server.client().info("semantic")["embedder_texts"])

    before = embedded()
    assert ask(proxy, "Which payment methods do you accept?", "embed-once")[1] == "MISS"
    after_miss = embedded()
    assert ask(proxy, "What payment methods do you accept?", "embed-once")[1] == "HIT"
    assert (after_miss - before, embedded() - after_miss) == (1, 1)


def test_backend_down_answers_502_with_a_clear_message(shared_pion_server: ServerProcess, tmp_path: Path) -> None:
    dead = free_port()
    p = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", f"http://127.0.0.1:{dead}",
                    "--no-cache")
    try:
        r = httpx.post(p.url + "/v1/chat/completions", timeout=30,
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 502
        assert r.json()["error"]["message"].startswith(f"backend 'vllm' at http://127.0.0.1:{dead} is unreachable")
        assert (r.headers["x-pion-cache"], r.json()["x_pion"]["source"]) == ("BYPASS", "full_inference")
    finally:
        p.stop()


def test_pion_server_down_serves_as_pure_proxy_and_cache_comes_back(fake_openai: FakeBackend, tmp_path: Path) -> None:
    server = start_server(tmp_path / "pion")
    p = start_proxy(tmp_path, "--backend", "openai", "--backend-url", fake_openai.url + "/v1",
                    *pion_args(server))
    try:
        wait_for_embedder(p)
        assert ask(p, "How do I open a bank account?", "downup")[1] == "MISS"
        assert ask(p, "How can I open a bank account?", "downup")[1] == "HIT"
        server.stop()
        answer, header, x = ask(p, "How can I open a bank account?", "downup")
        assert (header, x["source"]) == ("BYPASS", "full_inference")
        assert answer.endswith("How can I open a bank account?")
        assert p.stats()["cache_enabled"] is False
        server = start_server(tmp_path / "pion", port=server.port)
        httpx.get(p.url + "/v1/stats", timeout=30)
        import time
        time.sleep(1.1)  # the proxy retries the server at most once a second
        assert p.stats()["cache_enabled"] is True
        # The entry stored before the restart was persisted (WAL) and is served again.
        assert ask(p, "How can I open a bank account?", "downup")[1] == "HIT"
    finally:
        p.stop()
        server.stop()


def test_no_cache_flag_makes_a_pure_proxy(fake_openai: FakeBackend, tmp_path: Path) -> None:
    p = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url, "--no-cache",
                    "--pion-port", str(free_port()))
    try:
        for _ in range(2):
            assert ask(p, "Same question twice", "nc")[1] == "BYPASS"
        stats = p.stats()
        assert (stats["cache_enabled"], stats["full_inference"], stats["l1_cache_hits"]) == (False, 2, 0)
    finally:
        p.stop()


def test_x_pion_is_json_serialisable_in_raw_response(proxy: ProxyProcess) -> None:
    r = httpx.post(proxy.url + "/v1/chat/completions", timeout=30,
                   json={"model": "fake-model", "messages": [{"role": "user", "content": "raw json check"}]})
    data = json.loads(r.text)
    assert data["object"] == "chat.completion"
    assert set(data["x_pion"]) >= {"source", "latency_ms"}
