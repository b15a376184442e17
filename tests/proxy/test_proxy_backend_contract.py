"""Every backend against real local HTTP servers: a non-JSON 2xx reply becomes an OpenAI-shaped
502 naming the upstream status, and one credential rule (operator key first) holds for all."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import PlainTextResponse

from pion.proxy.backends import make_backend
from pion.proxy.backends.base import BackendHTTPError
from support.fake_backends import FakeBackend, running
from support.procs import free_port
from support.proxy_procs import start_proxy

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
BACKENDS = ("openai", "vllm", "ollama", "claude", "gemini")
KEY_ENV = {"openai": "OPENAI_API_KEY", "claude": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}


class HtmlServer:
    """Answers every request 200 text/html, like a captive portal or a misrouted load balancer."""

    def __init__(self) -> None:
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def anything(path: str, request: Request) -> PlainTextResponse:
            return PlainTextResponse("<html>gateway login</html>", media_type="text/html")

        self.port = free_port()
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                     lifespan="off", access_log=False))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HtmlServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def html_server() -> Iterator[HtmlServer]:
    with HtmlServer() as server:
        yield server


async def _call(name: str, url: str, what: str, headers: dict[str, str] | None = None) -> Any:
    async with httpx.AsyncClient(timeout=10) as http:
        backend = make_backend(name, url, http)
        if what == "complete":
            return await backend.complete(dict(CHAT), headers or {})
        return await backend.models(headers or {})


@pytest.mark.parametrize("what", ["complete", "models"])
@pytest.mark.parametrize("name", BACKENDS)
def test_a_non_json_reply_becomes_an_openai_shaped_502_naming_the_upstream_status(
        name: str, what: str, html_server: HtmlServer) -> None:
    with pytest.raises(BackendHTTPError) as info:
        asyncio.run(_call(name, html_server.url, what))
    assert info.value.status == 502
    error = info.value.payload["error"]
    assert (error["type"], error["code"], error["param"]) == ("backend_error", "upstream_200", None)
    assert error["message"] == (f"backend '{name}' answered HTTP 200 with a body that is not a JSON object: "
                                "'<html>gateway login</html>'")


def test_pion_serve_answers_a_non_json_backend_with_a_502_the_openai_sdk_understands(
        html_server: HtmlServer, tmp_path: Path) -> None:
    proxy = start_proxy(tmp_path, "--backend", "openai", "--backend-url", html_server.url, "--no-cache")
    try:
        resp = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, timeout=30)
        assert resp.status_code == 502
        assert sorted(resp.json()["error"]) == ["code", "message", "param", "type"]
        assert resp.json()["error"]["code"] == "upstream_200"
        models = httpx.get(f"{proxy.url}/v1/models", timeout=30)
        assert (models.status_code, models.json()["error"]["type"]) == (502, "backend_error")
    finally:
        proxy.stop()


# ---- one credential rule ---------------------------------------------------------------------
FAKE_KIND = {"openai": "openai", "claude": "anthropic", "gemini": "gemini"}
KEY_HEADER = {"openai": "authorization", "claude": "x-api-key", "gemini": "x-goog-api-key"}
OPERATOR_VALUE = {"openai": "Bearer op-key", "claude": "op-key", "gemini": "op-key"}


@pytest.fixture(scope="module", params=sorted(FAKE_KIND))
def keyed(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeBackend]]:
    gen = running(FAKE_KIND[request.param])
    yield request.param, next(gen)
    gen.close()


def test_the_operator_key_wins_over_the_client_credential_for_every_backend(
        keyed: tuple[str, FakeBackend], monkeypatch: pytest.MonkeyPatch) -> None:
    name, fake = keyed
    monkeypatch.setenv(KEY_ENV[name], "op-key")
    client = {KEY_HEADER[name]: "client-key", "authorization": "Bearer client-key"}
    asyncio.run(_call(name, fake.url, "complete", client))
    assert fake.state.last_headers[KEY_HEADER[name]] == OPERATOR_VALUE[name]


def test_without_an_operator_key_the_client_credential_is_forwarded(
        keyed: tuple[str, FakeBackend], monkeypatch: pytest.MonkeyPatch) -> None:
    name, fake = keyed
    monkeypatch.delenv(KEY_ENV[name], raising=False)
    own = "Bearer own" if name == "openai" else "own"
    asyncio.run(_call(name, fake.url, "complete", {KEY_HEADER[name]: own}))
    assert fake.state.last_headers[KEY_HEADER[name]] == own
