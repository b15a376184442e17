"""Small real HTTP servers speaking the documented wire formats of paid/remote LLM APIs.

They stand in for OpenAI-compatible servers (when pion-llm is not available), Ollama
(/api/chat NDJSON, /api/tags, /api/embed), an SIE embedding server (/v1/embeddings), Anthropic Messages (/v1/messages SSE events, /v1/models)
and Gemini (generateContent / streamGenerateContent?alt=sse, /v1beta/models). Each runs
uvicorn on a free 127.0.0.1 port in a thread.

Answers are deterministic and numbered, so a test can tell a cached answer (same number)
from a fresh one: ``"Answer 3 from <kind> to: <last user message>"``. Markers in the
last user message change behaviour: ``[error]`` -> HTTP 500, ``[tool]`` -> a tool call
(OpenAI only), ``[length]`` -> finish by length. ``FakeBackend.state`` holds the call count
and the last request's headers and body.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from support.procs import free_port


@dataclass
class FakeState:
    kind: str
    calls: int = 0
    last_headers: dict[str, str] = field(default_factory=dict)
    last_body: Any = None
    canned: dict[str, str] = field(default_factory=dict)  # question -> a recorded model answer

    def answer(self, text: str) -> str:
        if text in self.canned:
            return self.canned[text]
        return f"Answer {self.calls} from {self.kind} to: {text}"


def _last_user(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):
                return "".join(p.get("text", "") for p in c if isinstance(p, dict))
            return str(c)
    return ""


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


async def _record(state: FakeState, request: Request) -> Any:
    state.calls += 1
    state.last_headers = {k.lower(): v for k, v in request.headers.items()}
    state.last_body = json.loads(await request.body() or b"null")
    return state.last_body


def _openai_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await _record(state, request)
        text = _last_user(body["messages"])
        if "[error]" in text:
            return JSONResponse({"error": {"message": "fake overload", "type": "server_error", "code": "overloaded"}},
                                status_code=500)
        answer, finish = state.answer(text), "length" if "[length]" in text else "stop"
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        if "[tool]" in text:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}
            finish = "tool_calls"
        cid, created = f"chatcmpl-fake{state.calls}", int(time.time())
        if not body.get("stream"):
            return JSONResponse({"id": cid, "object": "chat.completion", "created": created, "model": body["model"],
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                 "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}})

        def chunk(delta: dict[str, Any], fin: str | None = None) -> bytes:
            return b"data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                           "model": body["model"],
                                           "choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}).encode() + b"\n\n"

        async def gen() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            if "[tool]" in text:
                yield chunk({"tool_calls": message["tool_calls"]})
            else:
                for w in _words(answer):
                    yield chunk({"content": w})
            yield chunk({}, finish)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(gen(), media_type="text/event-stream")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        state.last_headers = {k.lower(): v for k, v in request.headers.items()}
        return JSONResponse({"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0,
                                                         "owned_by": "fake"}]})

    return app


def _ollama_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.post("/api/chat")
    async def chat(request: Request) -> Response:
        body = await _record(state, request)
        text = _last_user(body["messages"])
        if "[error]" in text:
            return JSONResponse({"error": "model 'x' not found"}, status_code=404)
        answer, reason = state.answer(text), "length" if "[length]" in text else "stop"
        base = {"model": body["model"], "created_at": "2026-01-01T00:00:00Z"}
        if not body.get("stream", True):
            return JSONResponse(base | {"message": {"role": "assistant", "content": answer}, "done": True,
                                        "done_reason": reason, "prompt_eval_count": 5, "eval_count": 7})

        async def gen() -> AsyncIterator[bytes]:
            for w in _words(answer):
                yield json.dumps(base | {"message": {"role": "assistant", "content": w}, "done": False}).encode() + b"\n"
            yield json.dumps(base | {"message": {"role": "assistant", "content": ""}, "done": True,
                                     "done_reason": reason, "prompt_eval_count": 5, "eval_count": 7}).encode() + b"\n"

        return StreamingResponse(gen(), media_type="application/x-ndjson")

    @app.post("/api/embed")
    async def embed(request: Request) -> Response:
        body = json.loads(await request.body())
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return JSONResponse({"model": body["model"], "embeddings": [bag_of_words_vector(t) for t in inputs]})

    @app.get("/api/tags")
    async def tags() -> Response:
        return JSONResponse({"models": [{"name": "gemma3:4b", "model": "gemma3:4b", "size": 1}]})

    return app


def bag_of_words_vector(text: str, dim: int = 64) -> list[float]:
    """A deterministic stand-in embedding: hashed word counts, unit length."""
    import zlib

    vec = [0.0] * dim
    for word in text.lower().replace("?", " ").split():
        vec[zlib.crc32(word.encode()) % dim] += 1.0
    norm = sum(v * v for v in vec) ** 0.5 or 1.0
    return [v / norm for v in vec]


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _anthropic_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body = await _record(state, request)
        if not request.headers.get("x-api-key"):
            return JSONResponse({"type": "error", "error": {"type": "authentication_error",
                                                            "message": "x-api-key header is required"}}, status_code=401)
        text = _last_user(body["messages"])
        if "[error]" in text:
            return JSONResponse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                                status_code=529)
        answer, reason = state.answer(text), "max_tokens" if "[length]" in text else "end_turn"
        msg = {"id": f"msg_{state.calls}", "type": "message", "role": "assistant", "model": body["model"]}
        if not body.get("stream"):
            return JSONResponse(msg | {"content": [{"type": "text", "text": answer}], "stop_reason": reason,
                                       "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 7}})

        async def gen() -> AsyncIterator[bytes]:
            yield _sse("message_start", {"type": "message_start", "message": msg | {
                "content": [], "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 1}}})
            yield _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}})
            yield _sse("ping", {"type": "ping"})
            for w in _words(answer):
                yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": w}})
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            yield _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": reason,
                                                                            "stop_sequence": None},
                                         "usage": {"output_tokens": 7}})
            yield _sse("message_stop", {"type": "message_stop"})

        return StreamingResponse(gen(), media_type="text/event-stream")

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse({"data": [{"type": "model", "id": "claude-3-5-sonnet-20241022",
                                       "display_name": "Claude 3.5 Sonnet"}], "has_more": False})

    return app


def _gemini_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.post("/v1beta/models/{model_action:path}")
    async def generate(model_action: str, request: Request) -> Response:
        body = await _record(state, request)
        if not request.headers.get("x-goog-api-key"):
            return JSONResponse({"error": {"code": 403, "message": "API key missing", "status": "PERMISSION_DENIED"}},
                                status_code=403)
        model, _, action = model_action.partition(":")
        text = "".join(p.get("text", "") for p in body["contents"][-1]["parts"])
        if "[error]" in text:
            return JSONResponse({"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}},
                                status_code=500)
        answer, reason = state.answer(text), "MAX_TOKENS" if "[length]" in text else "STOP"
        usage = {"promptTokenCount": 5, "candidatesTokenCount": 7, "totalTokenCount": 12}

        def resp(part: str, fin: str | None) -> dict[str, Any]:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": part}]}, "index": 0}
            if fin:
                cand["finishReason"] = fin
            return {"candidates": [cand], "usageMetadata": usage, "modelVersion": model}

        if action == "generateContent":
            return JSONResponse(resp(answer, reason))
        if action != "streamGenerateContent" or request.query_params.get("alt") != "sse":
            return JSONResponse({"error": {"code": 404, "message": "unknown method", "status": "NOT_FOUND"}},
                                status_code=404)
        words = _words(answer)

        async def gen() -> AsyncIterator[bytes]:
            for i, w in enumerate(words):
                yield b"data: " + json.dumps(resp(w, reason if i == len(words) - 1 else None)).encode() + b"\r\n\r\n"

        return StreamingResponse(gen(), media_type="text/event-stream")

    @app.get("/v1beta/models")
    async def models() -> Response:
        return JSONResponse({"models": [{"name": "models/gemini-1.5-flash", "displayName": "Gemini 1.5 Flash"}]})

    return app


def _sie_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        body = await _record(state, request)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return JSONResponse({"object": "list", "model": body["model"], "data": [
            {"object": "embedding", "index": i, "embedding": bag_of_words_vector(t)} for i, t in enumerate(inputs)]})

    return app


_APPS = {"openai": _openai_app, "sie": _sie_app, "ollama": _ollama_app, "anthropic": _anthropic_app, "gemini": _gemini_app}


class FakeBackend:
    """One fake API server (``kind`` in openai | ollama | anthropic | gemini) in a thread."""

    def __init__(self, kind: str, port: int | None = None, canned: dict[str, str] | None = None) -> None:
        """``canned``: answers recorded from a real model, returned for exactly these questions."""
        self.state = FakeState(kind, canned=dict(canned or {}))
        self.port = port or free_port()
        config = uvicorn.Config(_APPS[kind](self.state), host="127.0.0.1", port=self.port,
                                log_level="warning", ws="none", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"fake-{kind}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeBackend:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"fake {self.state.kind} backend did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def running(kind: str) -> Iterator[FakeBackend]:
    """Generator for fixtures: a started fake backend, stopped afterwards."""
    backend = FakeBackend(kind).start()
    try:
        yield backend
    finally:
        backend.stop()
