"""pion-serve with its default backend, a real pion-llm (SmolLM2-135M), the openai SDK as client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder
from support.llm_procs import MODEL, LlmProcess, start_llm
from support.procs import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(shared_pion_server: ServerProcess,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlmProcess, ProxyProcess]]:
    llm = start_llm(tmp_path_factory.mktemp("llm"), "--no-pion")
    try:
        proxy = start_proxy(tmp_path_factory.mktemp("proxy"), "--backend-url", llm.url,
                            *pion_args(shared_pion_server))
        try:
            wait_for_embedder(proxy)
            yield llm, proxy
        finally:
            proxy.stop()
    finally:
        llm.stop()


def test_smollm2_answer_is_cached_and_served_to_a_paraphrase(stack: tuple[LlmProcess, ProxyProcess]) -> None:
    _, proxy = stack
    client = proxy.openai()
    kw = {"model": MODEL, "max_tokens": 48, "temperature": 0.0, "stop": ["\n"]}
    raw1 = client.chat.completions.with_raw_response.create(
        messages=[{"role": "user", "content": "What is the capital of France?"}], **kw)
    first = raw1.parse()
    assert raw1.headers["x-pion-cache"] == "MISS"
    assert first.model_extra["x_pion"]["source"] == "full_inference"
    raw2 = client.chat.completions.with_raw_response.create(
        messages=[{"role": "user", "content": "Tell me the capital city of France."}], **kw)
    if first.choices[0].finish_reason != "stop":
        pytest.fail(f"SmolLM2 did not finish by stop within 48 tokens: {first.choices[0]!r}")
    assert raw2.headers["x-pion-cache"] == "HIT"
    assert raw2.parse().choices[0].message.content == first.choices[0].message.content
    assert proxy.stats()["backend"] == "pion"


def test_smollm2_stream_goes_through_and_a_trap_is_not_served(stack: tuple[LlmProcess, ProxyProcess]) -> None:
    _, proxy = stack
    client = proxy.openai()
    kw = {"model": MODEL, "max_tokens": 48, "temperature": 0.0, "stop": ["\n"]}
    with client.chat.completions.with_streaming_response.create(
            stream=True, messages=[{"role": "user", "content": "Is this mushroom safe to eat?"}], **kw) as resp:
        chunks = list(resp.parse())
        assert resp.headers["x-pion-cache"] == "MISS"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) != ""
    raw = client.chat.completions.with_raw_response.create(
        messages=[{"role": "user", "content": "Is this mushroom unsafe to eat?"}], **kw)
    assert raw.headers["x-pion-cache"] == "MISS"
