"""pion-serve with no verifier flag runs the cross verifier (issue 18, sixth round), and a
pion-serve whose install cannot load the models keeps the guard instead of failing.

tests/conftest.py pins ``PION_SERVE_VERIFIER=guard`` for every other pion-serve a test
starts; the process here has that variable removed, so it sees the real default."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import pion_args, start_proxy, wait_for_embedder
from support.verifier_e2e import check_reworded_question_served, verdicts, wait_for_verifier

from pion.proxy import hit_verifier
from pion.proxy.config import load_config


@pytest.mark.slow  # loads MiniLM and the cross-encoder
def test_a_proxy_started_without_a_verifier_flag_serves_a_reworded_question_with_the_cross_verifier(
        shared_pion_server: ServerProcess, fake_openai: FakeBackend, tmp_path: Path) -> None:
    p = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url, *pion_args(shared_pion_server),
                    env={"PION_SERVE_VERIFIER": None, "PION_SERVE_CACHE_THRESHOLD": None})
    try:
        wait_for_embedder(p)
        wait_for_verifier(p)
        assert (verdicts(p)["verifier"], verdicts(p)["verifier_ready"]) == ("cross", True)
        # The guard refuses this pair (picture/photo, change/update: swapped words).
        check_reworded_question_served(p, "e2e default verifier", "How do I change my profile picture?",
                                       "How can I update my profile photo?")
    finally:
        p.stop()


def test_the_configured_default_is_cross_with_its_lookup_threshold() -> None:
    config = load_config([], env={})
    assert (config.verifier, config.cache_threshold) == ("cross", 0.65)


def test_an_install_that_cannot_build_the_cross_verifier_keeps_the_guard_and_says_why(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def missing_extras(*args: object, **kwargs: object) -> None:
        raise ImportError("No module named 'safetensors'")

    monkeypatch.setattr(hit_verifier, "CrossVerifier", missing_extras)
    verifier = hit_verifier.HitVerifier("cross")
    assert asyncio.run(verifier.load()) is False
    assert verifier.describe() == {"verifier": "cross", "verifier_ready": False,
                                   "verifier_unavailable": "ImportError: No module named 'safetensors'"}
    # The guard decides: an exact repeat is served, a changed number is refused.
    same = asyncio.run(verifier.verify("How do I reset my password?", "How do I reset my password?", 0.99))
    other = asyncio.run(verifier.verify("Is order 1234 shipped?", "Is order 1235 shipped?", 0.97))
    assert (same.ok, other.ok) == (True, False)
    assert [r.getMessage() for r in caplog.records] == [
        "--verifier cross cannot load (ImportError: No module named 'safetensors'; it needs pion[embed,runtime]);"
        " the guard decides"]
