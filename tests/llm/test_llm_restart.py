"""pion-llm keeps its prefix cache across its own restarts and degrades to uncached when pion-server is away."""

from __future__ import annotations

import pytest

import time
from pathlib import Path
from typing import Any

import httpx

from support.llm_procs import MODEL, LlmProcess, start_llm
from support.procs import ServerProcess, free_port, start_server

pytestmark = pytest.mark.slow  # starts pion-llm, which loads SmolLM2

SYSTEM = "You are a concise travel agent. You recommend one destination and one reason. " * 5
QUESTION = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where should I go in May?"}]


def ask(llm: LlmProcess, messages: list[dict[str, str]] = QUESTION) -> Any:
    return llm.openai().chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)


def hits(server: ServerProcess) -> int:
    with server.client() as conn:
        raw = conn.execute_command("PION.STATS")
    return int(dict(zip(raw[0::2], raw[1::2], strict=True))[b"kvprefix_hits"])


def test_after_restarting_pion_llm_the_first_request_already_hits(pion_server: ServerProcess, tmp_path: Path) -> None:
    first = start_llm(tmp_path, "--pion-port", str(pion_server.port))
    try:
        cold = ask(first)
    finally:
        first.stop()
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    second = start_llm(tmp_path, "--pion-port", str(pion_server.port))
    try:
        before = hits(pion_server)
        warm = ask(second)
        assert hits(pion_server) == before + 1
        assert warm.usage.prompt_tokens == cold.usage.prompt_tokens
        # Everything but the generation prompt (<|im_start|>assistant\n) comes from the cache.
        assert warm.usage.prompt_tokens_details.cached_tokens == cold.usage.prompt_tokens - 4

        pion_server.stop()
        down = ask(second)
        assert down.usage.prompt_tokens_details.cached_tokens == 0
        health = httpx.get(f"{second.url}/health", timeout=10).json()
        assert health["status"] == "ok"
        assert health["prefix_cache"]["status"] == "unavailable"
        assert health["warnings"][0].startswith("pion-server unavailable, serving uncached")
        assert "unavailable" in second.log()
    finally:
        second.stop()


def test_a_pion_llm_started_before_pion_server_serves_uncached_then_reconnects(tmp_path: Path) -> None:
    port = free_port()
    llm = start_llm(tmp_path, "--pion-port", str(port))
    server = None
    try:
        assert ask(llm).usage.prompt_tokens_details.cached_tokens == 0
        assert httpx.get(f"{llm.url}/health", timeout=10).json()["prefix_cache"]["status"] == "unavailable"
        server = start_server(tmp_path / "late-server", port=port)
        time.sleep(5.2)  # the store retries the connection at most every 5 s
        ask(llm)  # reconnects, misses, stores the segments
        assert ask(llm).usage.prompt_tokens_details.cached_tokens > 0
        assert httpx.get(f"{llm.url}/health", timeout=10).json()["prefix_cache"]["status"] == "ok"
    finally:
        llm.stop()
        if server is not None:
            server.stop()
