"""While the model loads, and after a load failed, pion-llm answers OpenAI-shaped 503s.

The real app on a real uvicorn port, driven by the openai SDK and httpx; the model load is held on a
gate so the "loading" window is deterministic instead of a race against a real load.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest
import uvicorn

from pion.llm.app import create_app
from pion.llm.engine import Engine
from support.llm_procs import MODEL
from support.procs import free_port

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


@dataclass
class GatedApp:
    url: str
    gate: threading.Event


@pytest.fixture
def gated_app() -> Iterator[GatedApp]:
    gate = threading.Event()

    def load() -> Engine:
        gate.wait(60)
        raise RuntimeError("weights file is truncated")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(MODEL, 4, load), host="127.0.0.1", port=port,
                                           log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield GatedApp(f"http://127.0.0.1:{port}", gate)
    finally:
        gate.set()
        server.should_exit = True
        thread.join(timeout=30)


def test_requests_while_loading_get_503_and_a_failed_load_keeps_answering_503(gated_app: GatedApp) -> None:
    url = gated_app.url
    health = httpx.get(f"{url}/health", timeout=10)
    assert (health.status_code, health.json()["status"]) == (503, "loading")
    resp = httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=10)
    assert resp.status_code == 503
    assert resp.json() == {"error": {"message": "the model is still loading; retry shortly", "type": "server_error",
                                     "param": None, "code": "model_loading"}}
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with client, pytest.raises(openai.InternalServerError) as info:
        client.completions.create(model=MODEL, prompt="Hello", max_tokens=2)
    assert info.value.status_code == 503

    gated_app.gate.set()
    deadline = time.monotonic() + 30
    while httpx.get(f"{url}/health", timeout=10).json()["status"] == "loading":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    health = httpx.get(f"{url}/health", timeout=10)
    assert (health.status_code, health.json()["status"]) == (503, "error")
    failed = httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=10).json()["error"]
    assert failed["message"] == "model failed to load: RuntimeError: weights file is truncated"
    assert failed["code"] == "model_load_failed"
