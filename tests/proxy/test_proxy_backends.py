"""pion-serve in front of test servers speaking the Ollama, Anthropic and Gemini wire formats.

The official openai SDK is the client; each backend is exercised non-streaming and
streaming, and the translated answer must come back from L1 on a paraphrase.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder
from support.fake_backends import FakeBackend, running
from support.procs import ServerProcess

pytestmark = pytest.mark.slow  # the proxy waits for the server to load MiniLM

KINDS = {  # pion-serve backend name -> (fake server kind, model)
    "ollama": ("ollama", "gemma3:4b"),
    "claude": ("anthropic", "claude-3-5-sonnet-20241022"),
    "gemini": ("gemini", "gemini-1.5-flash"),
}


@pytest.fixture(scope="module", params=sorted(KINDS))
def setup(request: pytest.FixtureRequest, shared_pion_server: ServerProcess,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FakeBackend, ProxyProcess]]:
    name = request.param
    fake_gen = running(KINDS[name][0])
    fake = next(fake_gen)
    env = {"ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gem-test"}
    proxy = start_proxy(tmp_path_factory.mktemp(name), "--backend", name, "--backend-url", fake.url,
                        "--model", KINDS[name][1], *pion_args(shared_pion_server), env=env)
    try:
        wait_for_embedder(proxy)
        yield name, fake, proxy
    finally:
        proxy.stop()
        fake_gen.close()


def _messages(system: str, question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def test_non_streaming_answer_is_translated_and_then_served_from_l1(setup: tuple[str, FakeBackend, ProxyProcess]) -> None:
    name, fake, proxy = setup
    client = proxy.openai()
    raw = client.chat.completions.with_raw_response.create(
        model="ignored", messages=_messages(f"{name}-ns", "How do I cancel my subscription?"), max_tokens=50)
    first = raw.parse()
    assert raw.headers["x-pion-cache"] == "MISS"
    assert first.object == "chat.completion"
    assert first.choices[0].finish_reason == "stop"
    assert first.choices[0].message.content == f"Answer {fake.state.calls} from {KINDS[name][0]} to: How do I cancel my subscription?"
    assert first.usage.completion_tokens == 7
    raw = client.chat.completions.with_raw_response.create(
        model="ignored", messages=_messages(f"{name}-ns", "How can I cancel my subscription?"))
    assert raw.headers["x-pion-cache"] == "HIT"
    assert raw.parse().choices[0].message.content == first.choices[0].message.content


def test_streaming_answer_arrives_as_openai_chunks_and_streams_back_from_l1(setup: tuple[str, FakeBackend, ProxyProcess]) -> None:
    name, fake, proxy = setup
    client = proxy.openai()
    texts, headers = [], []
    for q in ("What payment methods do you accept?", "Which payment methods do you accept?"):
        with client.chat.completions.with_streaming_response.create(
                model="ignored", stream=True, messages=_messages(f"{name}-st", q)) as resp:
            headers.append(resp.headers["x-pion-cache"])
            chunks = list(resp.parse())
        assert {c.object for c in chunks} == {"chat.completion.chunk"}
        assert chunks[-1].choices[0].finish_reason == "stop"
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
    assert headers == ["MISS", "HIT"]
    assert texts[0] == f"Answer {fake.state.calls} from {KINDS[name][0]} to: What payment methods do you accept?"
    assert texts[1] == texts[0]


def test_request_translation_carries_system_prompt_model_and_limits(setup: tuple[str, FakeBackend, ProxyProcess]) -> None:
    name, fake, proxy = setup
    proxy.openai().chat.completions.create(model="ignored", messages=_messages("Be brief.", f"{name} translation"),
                                           max_tokens=33, temperature=0.2)
    body, headers = fake.state.last_body, fake.state.last_headers
    if name == "ollama":
        assert body["model"] == "gemma3:4b"
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}
        assert body["options"] == {"temperature": 0.2, "num_predict": 33}
    elif name == "claude":
        assert (body["model"], body["system"], body["max_tokens"]) == ("claude-3-5-sonnet-20241022", "Be brief.", 33)
        assert body["messages"] == [{"role": "user", "content": "claude translation"}]
        assert (headers["x-api-key"], headers["anthropic-version"]) == ("sk-ant-test", "2023-06-01")
    else:
        assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
        assert body["contents"] == [{"role": "user", "parts": [{"text": "gemini translation"}]}]
        assert body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 33}
        assert headers["x-goog-api-key"] == "gem-test"


def test_length_finish_is_translated_and_not_cached(setup: tuple[str, FakeBackend, ProxyProcess]) -> None:
    name, _, proxy = setup
    client = proxy.openai()
    for expected in ("MISS", "MISS"):
        raw = client.chat.completions.with_raw_response.create(
            model="ignored", messages=_messages(f"{name}-len", "Write an essay [length]"))
        assert raw.headers["x-pion-cache"] == expected
        assert raw.parse().choices[0].finish_reason == "length"


def test_backend_error_status_passes_through_openai_shaped(setup: tuple[str, FakeBackend, ProxyProcess]) -> None:
    name, _, proxy = setup
    with pytest.raises(openai.APIStatusError) as info:
        proxy.openai().chat.completions.create(model="ignored", messages=_messages(f"{name}-err", "fail [error]"))
    expected = {"ollama": (404, "model 'x' not found"), "claude": (529, "Overloaded"),
                "gemini": (500, "Internal error")}[name]
    assert (info.value.status_code, info.value.body["message"]) == expected


def test_models_list_is_translated(setup: tuple[str, FakeBackend, ProxyProcess]) -> None:
    name, _, proxy = setup
    ids = [m.id for m in proxy.openai().models.list().data]
    assert ids == [{"ollama": "gemma3:4b", "claude": "claude-3-5-sonnet-20241022", "gemini": "gemini-1.5-flash"}[name]]


@pytest.mark.parametrize("embed_backend", ["ollama", "sie"])
def test_external_embedder_sends_vectors_and_counts_its_calls(embed_backend: str, shared_pion_server: ServerProcess,
                                                             fake_openai: FakeBackend, tmp_path: Path) -> None:
    gen = running("ollama" if embed_backend == "ollama" else "sie")
    embedder = next(gen)
    url_flag = "--ollama-url" if embed_backend == "ollama" else "--sie-url"
    proxy = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url, "--embed-backend",
                        embed_backend, url_flag, embedder.url, *pion_args(shared_pion_server))
    try:
        msgs = _messages(f"embed-{embed_backend}", "How do I reset my password?")
        client = proxy.openai()
        first = client.chat.completions.with_raw_response.create(model="fake-model", messages=msgs)
        second = client.chat.completions.with_raw_response.create(model="fake-model", messages=msgs)
        assert (first.headers["x-pion-cache"], second.headers["x-pion-cache"]) == ("MISS", "HIT")
        assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
        stats = proxy.stats()["embedder"]
        assert stats["backend"] == embed_backend
        assert stats["calls"][embed_backend] == 2
        assert stats["calls"]["pion"] == 0
    finally:
        proxy.stop()
        gen.close()
