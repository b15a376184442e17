"""What every backend offers pion-serve, and the errors it may raise.

A backend turns an OpenAI chat-completions request body into a call to its own API and
answers in OpenAI shapes: ``complete`` returns a ``chat.completion`` dict, ``stream``
yields ``chat.completion.chunk`` dicts, ``models`` returns a ``list`` of models.

Errors: ``BackendUnavailable`` when the backend cannot be reached (the proxy answers 502);
``BackendHTTPError`` when it answered with an error status (passed through, never
cached) or with a 2xx body that is not a JSON object (502, the upstream status and the
start of the body in the message; ``json_object``).

Credentials, one rule for every backend (``Backend.credential``): the operator's key in
the backend's environment variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
``GEMINI_API_KEY``) wins; without one, the client's own credential header is forwarded.
OpenAI SDK clients always send some ``Authorization`` (often a placeholder for a local
proxy), so a configured operator key must not lose to it. Connection errors are retried; nothing else is, because a request that reached
the backend may already have been billed.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import httpx

CONNECT_RETRIES = 2
RETRY_DELAY_S = 0.2


class BackendUnavailable(Exception):
    """The backend did not accept a connection (or timed out)."""


class BackendHTTPError(Exception):
    """The backend answered with an error status; ``payload`` is OpenAI-shaped."""

    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        super().__init__(f"backend returned HTTP {status}")
        self.status = status
        self.payload = payload


def openai_error(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def make_completion(model: str, content: str, finish_reason: str | None, usage: dict[str, int] | None = None,
                    cid: str | None = None) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object with one choice."""
    return {
        "id": cid or completion_id(), "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def make_chunk(cid: str, model: str, delta: dict[str, Any], finish_reason: str | None = None,
               created: int | None = None) -> dict[str, Any]:
    """An OpenAI ``chat.completion.chunk`` with one choice."""
    return {"id": cid, "object": "chat.completion.chunk", "created": created or int(time.time()),
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def usage_of(prompt: int | None, completion: int | None) -> dict[str, int]:
    p, c = int(prompt or 0), int(completion or 0)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, dict) and part.get("type") == "text")
    return ""


def max_tokens_of(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return int(value) if isinstance(value, int) else None


def stop_list(body: Mapping[str, Any]) -> list[str] | None:
    stop = body.get("stop")
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list):
        return [s for s in stop if isinstance(s, str)]
    return None


def json_object(response: httpx.Response, backend: str) -> dict[str, Any]:
    """A 2xx response's body as a JSON object, or ``BackendHTTPError(502)`` naming the upstream status.

    A proxy or load balancer in front of a backend may answer 200 with an HTML page; that must
    reach the client as an OpenAI-shaped error, not as a 500 from a failed ``response.json()``.
    """
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        start = response.text[:200].replace("\n", " ")
        raise BackendHTTPError(502, openai_error(
            f"backend '{backend}' answered HTTP {response.status_code} with a body that is not a JSON object: "
            f"{start!r}", "backend_error", f"upstream_{response.status_code}"))
    return data


async def error_payload(response: httpx.Response) -> dict[str, Any]:
    """The backend's error body in OpenAI shape (wrapping non-OpenAI bodies)."""
    raw = await response.aread()
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict) and "message" in data["error"]:
        err = data["error"]
        return openai_error(str(err["message"]), str(err.get("type") or err.get("status") or "backend_error"),
                            str(err["code"]) if err.get("code") is not None else None)
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return openai_error(data["error"], "backend_error")
    text = raw.decode("utf-8", "replace")[:500]
    return openai_error(f"backend returned HTTP {response.status_code}: {text}", "backend_error")


class Backend(ABC):
    """One LLM API behind pion-serve. Subclasses set ``default_url`` and ``key_env``."""

    default_url = ""
    key_env = ""

    def __init__(self, name: str, base_url: str | None, http: httpx.AsyncClient) -> None:
        self.name = name
        self.base_url = (base_url or self.default_url).rstrip("/")
        self.http = http

    @property
    def env_key(self) -> str | None:
        return os.environ.get(self.key_env) if self.key_env else None

    def credential(self, client: Mapping[str, str], header: str, scheme: str = "") -> dict[str, str]:
        """The credential header to send: the operator's key (``key_env``) if set, else the client's.

        ``header`` is where this backend takes its key (``authorization``, ``x-api-key``,
        ``x-goog-api-key``); ``scheme`` prefixes the operator key (``"Bearer "``). From the client,
        ``header`` is forwarded if present, else its ``authorization``.
        """
        if self.env_key:
            return {header: f"{scheme}{self.env_key}"}
        for name in dict.fromkeys((header, "authorization")):
            if client.get(name):
                return {name: client[name]}
        return {}

    @abstractmethod
    async def complete(self, body: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        """Non-streaming chat completion -> OpenAI ``chat.completion`` dict."""

    @abstractmethod
    def stream(self, body: dict[str, Any], headers: Mapping[str, str]) -> AsyncGenerator[dict[str, Any], None]:
        """Streaming chat completion -> OpenAI ``chat.completion.chunk`` dicts.

        Errors before the first chunk raise from the first ``__anext__``.
        """

    @abstractmethod
    async def models(self, headers: Mapping[str, str]) -> dict[str, Any]:
        """The backend's models as an OpenAI ``list`` object."""

    async def send(self, method: str, url: str, *, headers: Mapping[str, str],
                   json_body: Any = None, stream: bool = False) -> httpx.Response:
        """One HTTP call, retried only when the connection itself failed.

        Returns a response with a 2xx status (streamed responses are open and must be
        closed by the caller); raises ``BackendHTTPError`` or ``BackendUnavailable``.
        """
        request = self.http.build_request(method, url, headers=dict(headers), json=json_body)
        for attempt in range(CONNECT_RETRIES + 1):
            try:
                response = await self.http.send(request, stream=stream)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt == CONNECT_RETRIES:
                    raise BackendUnavailable(
                        f"backend '{self.name}' at {self.base_url} is unreachable: {exc}") from exc
                await asyncio.sleep(RETRY_DELAY_S * (attempt + 1))
            except httpx.TimeoutException as exc:
                raise BackendUnavailable(f"backend '{self.name}' at {self.base_url} timed out") from exc
            except httpx.HTTPError as exc:
                raise BackendUnavailable(f"backend '{self.name}' at {self.base_url} failed: {exc}") from exc
        if response.status_code >= 400:
            payload = await error_payload(response)
            await response.aclose()
            raise BackendHTTPError(response.status_code, payload)
        return response


async def sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The ``data:`` payloads of a server-sent-events body (multi-line data joined)."""
    buf: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            buf.append(line[5:].lstrip(" "))
        elif line == "" and buf:
            yield "\n".join(buf)
            buf = []
    if buf:
        yield "\n".join(buf)
