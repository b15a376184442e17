"""The official openai SDK against a real pion-llm (SmolLM2) on a real pion-server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from support.llm_procs import MODEL, LlmProcess, start_llm
from support.procs import ServerProcess

pytestmark = pytest.mark.slow  # starts pion-llm, which loads SmolLM2

SYSTEM = ("You are the support assistant of ACME Corp. You answer questions about accounts, billing and "
          "passwords in one short sentence. Never invent product names. ") * 4


@pytest.fixture(scope="module")
def llm(shared_pion_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmProcess]:
    proc = start_llm(tmp_path_factory.mktemp("llm"), "--pion-port", str(shared_pion_server.port), "--max-queue", "1")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def system_tokens() -> int:
    """Tokens of the rendered system message (the first segment of every conversation here)."""
    from transformers import AutoTokenizer

    from pion.client.runtimes.model_files import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(MODEL).path)
    return len(tok.apply_chat_template([{"role": "system", "content": SYSTEM}], tokenize=True,
                                       return_dict=True)["input_ids"])


def chat(llm: LlmProcess, *turns: str, max_tokens: int = 8, **kwargs: Any) -> Any:
    messages = [{"role": "system", "content": SYSTEM}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return llm.openai().chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens,
                                                temperature=0, **kwargs)


def stats(server: ServerProcess) -> dict[str, Any]:
    with server.client() as conn:
        raw = conn.execute_command("PION.STATS")
    pairs = dict(zip(raw[0::2], raw[1::2], strict=True))
    return {k.decode(): float(v) for k, v in pairs.items()}


def test_chat_completion_has_the_openai_shape(llm: LlmProcess) -> None:
    resp = chat(llm, "How do I reset my password?", max_tokens=6)
    assert resp.object == "chat.completion"
    assert resp.model == MODEL
    assert resp.id.startswith("chatcmpl-")
    assert len(resp.choices) == 1
    assert resp.choices[0].message.role == "assistant"
    assert isinstance(resp.choices[0].message.content, str)
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.completion_tokens <= 6
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert resp.usage.prompt_tokens_details.cached_tokens >= 0
    raw = httpx.post(f"{llm.url}/v1/chat/completions", timeout=120,
                     json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).json()
    assert sorted(raw) == ["choices", "created", "id", "model", "object", "system_fingerprint", "usage"]
    assert isinstance(raw["created"], int)
    choice = raw["choices"][0]
    assert (sorted(choice), choice["index"], choice["logprobs"]) == (["finish_reason", "index", "logprobs",
                                                                      "message"], 0, None)
    assert sorted(raw["usage"]) == ["completion_tokens", "prompt_tokens", "prompt_tokens_details", "total_tokens"]


def test_streaming_sends_chat_completion_chunks_ending_with_done(llm: LlmProcess) -> None:
    body = {"model": MODEL, "messages": [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": "Say hello."}],
            "max_tokens": 6, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    chat(llm, "Say hello.", max_tokens=6)  # warm the cache so both calls below restore the same rows
    with httpx.stream("POST", f"{llm.url}/v1/chat/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    assert chunks[-2]["choices"][0]["delta"] == {}
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] <= 6
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    assert streamed == chat(llm, "Say hello.", max_tokens=6).choices[0].message.content


def test_the_sdk_streams_the_same_text_as_a_plain_request(llm: LlmProcess) -> None:
    plain = chat(llm, "What is billing?", max_tokens=6).choices[0].message.content
    stream = chat(llm, "What is billing?", max_tokens=6, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == plain


def test_completions_and_models_follow_the_openai_shapes(llm: LlmProcess) -> None:
    client = llm.openai()
    resp = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=4, temperature=0)
    assert resp.object == "text_completion"
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.completion_tokens <= 4
    assert [m.id for m in client.models.list().data] == [MODEL]
    pieces = client.completions.create(model=MODEL, prompt="One, two,", max_tokens=4, temperature=0, stream=True)
    assert [p.object for p in pieces][-1] == "text_completion"


def test_a_second_request_with_the_same_system_prompt_restores_it(llm: LlmProcess, shared_pion_server: ServerProcess,
                                                                   system_tokens: int) -> None:
    chat(llm, "First question: where is my invoice?")
    before = stats(shared_pion_server)
    second = chat(llm, "Second question: how do I change my email?")
    after = stats(shared_pion_server)
    assert second.usage.prompt_tokens_details.cached_tokens >= system_tokens
    assert after["kvprefix_hits"] == before["kvprefix_hits"] + 1
    assert after["kvprefix_tokens_served"] == (before["kvprefix_tokens_served"]
                                               + second.usage.prompt_tokens_details.cached_tokens)


def test_turn_two_of_a_conversation_reuses_more_than_the_system_prompt(llm: LlmProcess, system_tokens: int) -> None:
    first = chat(llm, "Turn one: my account is locked.")
    answer = first.choices[0].message.content
    second = chat(llm, "Turn one: my account is locked.", answer, "Turn two: what now?")
    assert second.usage.prompt_tokens_details.cached_tokens > system_tokens
    assert second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens


BAD_BODIES = [
    ({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": MODEL, "messages": []}, "messages"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": -5}, "max_tokens"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}, "max_tokens"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0},
     "max_completion_tokens"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 5}, "temperature"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "top_p": 0}, "top_p"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ({"model": MODEL, "messages": "hi"}, "messages"),
    ({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9000}, "messages"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "logprobs": True}, "logprobs"),
    # found by schemathesis (test_openapi_fuzz.py): a seed over int64 was a 500 from torch
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": 2**64}, "seed"),
]

# Fields pion-llm would otherwise ignore are refused when they ask for something, as n > 1 is.
BAD_COMPLETION_BODIES = [
    ({"model": MODEL, "prompt": "Hi", "echo": True}, "echo"),
    ({"model": MODEL, "prompt": "Hi", "best_of": 3}, "best_of"),
    ({"model": MODEL, "prompt": "Hi", "logprobs": 2}, "logprobs"),
    ({"model": MODEL, "prompt": "Hi", "suffix": "end"}, "suffix"),
    ({"model": MODEL, "prompt": "Hi", "n": 2}, "n"),
]


@pytest.mark.parametrize(("body", "param"), BAD_COMPLETION_BODIES)
def test_completion_fields_that_would_be_ignored_get_a_400_naming_the_field(
        llm: LlmProcess, body: dict[str, Any], param: str) -> None:
    resp = httpx.post(f"{llm.url}/v1/completions", json=body, timeout=30)
    assert (resp.status_code, resp.json()["error"]["param"], resp.json()["error"]["type"]) == (
        400, param, "invalid_request_error")


def test_completion_fields_at_their_neutral_values_are_accepted(llm: LlmProcess) -> None:
    body = {"model": MODEL, "prompt": "Hi", "echo": False, "best_of": 1, "suffix": None, "max_tokens": 2}
    resp = httpx.post(f"{llm.url}/v1/completions", json=body, timeout=120)
    assert (resp.status_code, resp.json()["object"]) == (200, "text_completion")


@pytest.mark.parametrize(("body", "param"), BAD_BODIES)
def test_bad_chat_requests_get_openai_shaped_400s(llm: LlmProcess, body: dict[str, Any], param: str) -> None:
    resp = httpx.post(f"{llm.url}/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert sorted(resp.json()) == ["error"]
    assert sorted(error) == ["code", "message", "param", "type"]
    assert error["type"] == "invalid_request_error"
    assert error["param"].split(".")[0] == param
    assert isinstance(error["message"], str)


def test_bad_requests_raise_bad_request_error_in_the_sdk(llm: LlmProcess) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        llm.openai().completions.create(model=MODEL, prompt="", max_tokens=3)
    assert info.value.status_code == 400
    resp = httpx.post(f"{llm.url}/v1/completions", content=b"{not json", timeout=30,
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"


def test_health_and_metrics_report_the_model_and_the_cache(llm: LlmProcess) -> None:
    health = httpx.get(f"{llm.url}/health", timeout=10).json()
    assert health["status"] == "ok"
    assert health["model"] == MODEL
    assert health["prefix_cache"]["backend"] == "pion-server"
    assert health["prefix_cache"]["status"] == "ok"
    metrics = httpx.get(f"{llm.url}/metrics", timeout=10).text
    assert "pion_llm_ttft_seconds_count" in metrics
    assert "pion_llm_cached_tokens_total" in metrics


def test_a_full_queue_answers_429_and_a_disconnect_cancels_generation(llm: LlmProcess, tmp_path: Path) -> None:
    long_body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a very long story."}],
                 "max_tokens": 400, "temperature": 0, "stream": True}
    waiting: dict[str, Any] = {}

    def queued_request() -> None:
        waiting["resp"] = chat(llm, "Queued question.", max_tokens=3)

    with httpx.stream("POST", f"{llm.url}/v1/chat/completions", json=long_body, timeout=120) as running:
        lines = running.iter_lines()
        assert next(line for line in lines if line).startswith("data: ")  # the model is now busy
        thread = threading.Thread(target=queued_request)
        thread.start()
        deadline = time.monotonic() + 30
        while httpx.get(f"{llm.url}/health", timeout=10).json()["queue"] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(openai.RateLimitError) as info:
            chat(llm, "One request too many.", max_tokens=3)
        assert info.value.status_code == 429
        assert info.value.body["code"] == "rate_limit_exceeded"
        assert info.value.body["type"] == "rate_limit_error"
    # Leaving the block closed the stream mid-generation; the queued request now runs.
    thread.join(timeout=120)
    assert waiting["resp"].choices[0].finish_reason in ("stop", "length")
    cancelled = [line for line in llm.log().splitlines() if "generation cancelled after" in line]
    assert len(cancelled) == 1
    assert int(cancelled[0].split("after ")[1].split()[0]) < 400


def test_an_abandoned_non_stream_request_stops_generating(llm: LlmProcess) -> None:
    def cancelled_lines() -> list[str]:
        return [line for line in llm.log().splitlines() if "generation cancelled after" in line]

    before = len(cancelled_lines())
    # Greedy SmolLM2 answers this with all 400 tokens (~4 s or more on this CPU), so the client's 1.5 s
    # read timeout always fires first ("Count from one to a thousand." stopped after 18 tokens).
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a long story about a dragon who learns to fly."}],
            "max_tokens": 400, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{llm.url}/v1/chat/completions", json=body, timeout=httpx.Timeout(30.0, read=1.5))
    deadline = time.monotonic() + 60
    while len(cancelled_lines()) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(cancelled_lines()) == before + 1
    assert int(cancelled_lines()[-1].split("after ")[1].split()[0]) < 400
