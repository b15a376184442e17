"""Schemathesis against the OpenAPI documents of pion-llm and pion-serve, the stack ``make up`` runs:
pion-server, pion-llm (real SmolLM2-135M) and pion-serve in front of it.

Every generated request (valid and invalid bodies, wrong types, odd strings) must get no 5xx, and
every answer of an OpenAI route must be OpenAI-shaped: a JSON object with ``object`` (a result) or
``error.message`` + ``error.type`` (a refusal), or an SSE stream of such JSON chunks ending
``data: [DONE]``. The example count is bounded (``EXAMPLES`` per operation) and ``max_tokens`` is
capped at 8 so a generated request that asks for a long generation does not turn the test into a
benchmark; the budget is otherwise left to the fuzzer.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from support.llm_procs import MODEL, LlmProcess, start_llm
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder

schemathesis = pytest.importorskip("schemathesis")  # a dev extra: the module skips where it is missing
from schemathesis.generation.modes import GenerationMode  # after the skip, which it needs

pytestmark = pytest.mark.slow

EXAMPLES = 12  # per operation; each valid chat request runs SmolLM2 for up to MAX_TOKENS tokens
MAX_TOKENS = 8
# The OpenAI routes (/health, /metrics and pion-serve's /v1/stats have Pion's own shapes: no 5xx only).
OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/models"})
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                         phases=[Phase.explicit, Phase.generate],
                         suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def llm(shared_pion_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmProcess]:
    proc = start_llm(tmp_path_factory.mktemp("llm"), "--pion-port", str(shared_pion_server.port))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def proxy(shared_pion_server: ServerProcess, llm: LlmProcess,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    proc = start_proxy(tmp_path_factory.mktemp("proxy"), "--backend-url", llm.url, *pion_args(shared_pion_server))
    try:
        wait_for_embedder(proxy=proc)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def llm_schema(llm: LlmProcess) -> Any:
    return schemathesis.openapi.from_url(f"{llm.url}/openapi.json")


@pytest.fixture(scope="module")
def proxy_schema(proxy: ProxyProcess) -> Any:
    return schemathesis.openapi.from_url(f"{proxy.url}/openapi.json")


def _bounded(case: Any) -> None:
    """Name the served model (a random model id only ever meets the 404 path) and cap the generation
    length: a valid request for 10^9 tokens is valid, but not worth minutes here."""
    if isinstance(case.body, dict):
        if isinstance(case.body.get("model"), str):
            case.body["model"] = MODEL
        for field in ("max_tokens", "max_completion_tokens"):
            if isinstance(case.body.get(field), int) and not isinstance(case.body[field], bool):
                case.body[field] = min(case.body[field], MAX_TOKENS) if case.body[field] > 0 else case.body[field]
        if "max_tokens" not in case.body and "max_completion_tokens" not in case.body:
            case.body["max_tokens"] = MAX_TOKENS


def _header(response: Any, name: str) -> str:
    value = response.headers.get(name) or response.headers.get(name.title()) or ""
    return str(value[0] if isinstance(value, list) else value)


def check_openai_shaped(path: str, response: Any) -> None:
    """No 5xx; an OpenAI route's answer is an OpenAI object, an OpenAI error, or an SSE stream of chunks."""
    assert response.status_code < 500, (path, response.status_code, response.content[:500])
    if path not in OPENAI_PATHS:
        return
    content_type = _header(response, "content-type")
    if content_type.startswith("text/event-stream"):
        events = [line[len("data: "):] for line in response.content.decode().splitlines() if line.startswith("data: ")]
        assert (len(events) >= 1, events[-1]) == (True, "[DONE]"), response.content[:500]
        for event in events[:-1]:
            chunk = json.loads(event)
            assert ("object" in chunk or "error" in chunk) is True, chunk
        return
    assert content_type.startswith("application/json") is True, (content_type, response.content[:200])
    body = json.loads(response.content)
    assert isinstance(body, dict) is True, body
    if response.status_code >= 400:
        error = body.get("error")
        assert isinstance(error, dict) is True, body
        assert (isinstance(error.get("message"), str), isinstance(error.get("type"), str)) == (True, True), body
    else:
        assert isinstance(body.get("object"), str) is True, body


def fuzz(schema: Any, base_url: str) -> tuple[list[str], Counter[int]]:
    """Run every operation with schema-valid and schema-violating cases; returns what ran and the
    status codes of the chat completions route.

    Hypothesis drives schemathesis's per-operation strategies directly (``as_strategy``): the
    pytest integration (``schemathesis.pytest.from_fixture``) does not work with pytest 9.
    """
    ran: list[str] = []
    chat_statuses: Counter[int] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @FUZZ_SETTINGS
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                _bounded(case)
                response = case.call(base_url=base_url, timeout=120)
                try:
                    check_openai_shaped(case.path, response)
                except AssertionError as exc:
                    raise AssertionError(f"{case.method} {case.path} body={case.body!r}: {exc}") from exc
                if case.path == "/v1/chat/completions":
                    chat_statuses[response.status_code] += 1

            try:
                run()
            except Unsatisfiable:
                if mode is GenerationMode.POSITIVE:
                    raise
                continue  # an operation without inputs (GET /health) has nothing to violate
            ran.append(f"{operation.method.upper()} {operation.path} {mode.value}")
    return sorted(ran), chat_statuses


def test_pion_llm_answers_every_generated_request_openai_shaped_without_5xx(llm_schema: Any, llm: LlmProcess) -> None:
    ran, chat_statuses = fuzz(llm_schema, llm.url)
    assert (chat_statuses[200] > 0, chat_statuses[400] > 0) == (True, True), chat_statuses
    assert [r for r in ran if "/v1/chat/completions" in r] == [
        "POST /v1/chat/completions negative", "POST /v1/chat/completions positive"]
    assert [r for r in ran if "/v1/completions" in r] == ["POST /v1/completions negative", "POST /v1/completions positive"]
    assert [r for r in ran if r.endswith("positive")] == [
        "GET /health positive", "GET /metrics positive", "GET /v1/models positive",
        "POST /v1/chat/completions positive", "POST /v1/completions positive"]


def test_pion_serve_answers_every_generated_request_openai_shaped_without_5xx(
        proxy_schema: Any, proxy: ProxyProcess) -> None:
    ran, chat_statuses = fuzz(proxy_schema, proxy.url)
    assert (chat_statuses[200] > 0, chat_statuses[400] > 0) == (True, True), chat_statuses
    assert [r for r in ran if "/v1/chat/completions" in r] == [
        "POST /v1/chat/completions negative", "POST /v1/chat/completions positive"]
    assert [r for r in ran if r.endswith("positive")] == [
        "GET /health positive", "GET /metrics positive", "GET /v1/models positive", "GET /v1/stats positive",
        "POST /v1/chat/completions positive"]
