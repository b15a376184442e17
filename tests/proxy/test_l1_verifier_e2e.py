"""L1 verification and conversation scope through a real pion-serve and pion-server.

openai SDK -> pion-serve (``--verifier aligned`` and the default guard) -> the small
OpenAI-compatible test backend; L1 lives in a real pion-server that embeds with MiniLM,
and the aligned verifier loads WordNet, hence ``slow``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def aligned(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    p = start_proxy(tmp_path_factory.mktemp("aligned"), "--backend", "vllm", "--backend-url", fake_openai.url,
                    "--verifier", "aligned", "--cache-threshold", "0.8", *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        wait_for_verifier(p)
        yield p
    finally:
        p.stop()


def wait_for_verifier(proxy: ProxyProcess, timeout_s: float = 120.0) -> None:
    """Until WordNet is loaded the guard decides; wait so the aligned verifier is tested."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proxy.stats()["l1_verdicts"]["verifier_ready"] is True:
            return
        time.sleep(0.2)
    raise RuntimeError("pion-serve never loaded WordNet")


@pytest.fixture(scope="module")
def guarded(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    p = start_proxy(tmp_path_factory.mktemp("guarded"), "--backend", "vllm", "--backend-url", fake_openai.url,
                    *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        yield p
    finally:
        p.stop()


def chat(proxy: ProxyProcess, messages: list[dict[str, Any]]) -> tuple[str, str]:
    """(answer, X-Pion-Cache) for one non-streaming request."""
    raw = proxy.openai().chat.completions.with_raw_response.create(model="fake-model", messages=messages)
    return raw.parse().choices[0].message.content or "", raw.headers["x-pion-cache"]


def ask(proxy: ProxyProcess, system: str, *user_turns: str) -> tuple[str, str]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in user_turns[:-1]:
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": "Okay."}]
    return chat(proxy, [*messages, {"role": "user", "content": user_turns[-1]}])


def verdicts(proxy: ProxyProcess) -> dict[str, Any]:
    return proxy.stats()["l1_verdicts"]


def metric(proxy: ProxyProcess, line_start: str) -> float:
    for line in httpx.get(proxy.url + "/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[1])
    return 0.0


def test_a_synonym_paraphrase_is_served_by_the_aligned_verifier(aligned: ProxyProcess) -> None:
    first, h1 = ask(aligned, "e2e synonyms", "How do I change my profile picture?")
    served_before = verdicts(aligned)["served"]
    second, h2 = ask(aligned, "e2e synonyms", "How can I update my profile photo?")
    assert (h1, h2, second) == ("MISS", "HIT", first)
    assert verdicts(aligned)["served"] == served_before + 1


def test_a_follow_up_after_the_same_context_in_other_words_is_served(aligned: ProxyProcess) -> None:
    first, h1 = ask(aligned, "e2e conv", "I have a Flixora subscription.", "How do I cancel it?")
    second, h2 = ask(aligned, "e2e conv", "I have a subscription to Flixora.", "How can I cancel it?")
    assert (h1, h2, second) == ("MISS", "HIT", first)


def test_the_same_follow_up_after_another_context_is_not_served(aligned: ProxyProcess) -> None:
    ask(aligned, "e2e conv trap", "I have a Flixora subscription.", "How do I cancel it?")
    answer, header = ask(aligned, "e2e conv trap", "I have a gym membership.", "How do I cancel it?")
    assert header == "MISS"
    assert answer.endswith("How do I cancel it?")


def test_a_follow_up_under_another_system_prompt_is_not_served(aligned: ProxyProcess) -> None:
    ask(aligned, "e2e conv scope A", "I have a Flixora subscription.", "How do I cancel it?")
    assert ask(aligned, "e2e conv scope B", "I have a Flixora subscription.", "How do I cancel it?")[1] == "MISS"


def test_refusals_are_counted_per_stage_and_reason_in_stats_and_metrics(aligned: ProxyProcess) -> None:
    before = verdicts(aligned)
    m_before = metric(aligned, 'pion_serve_l1_verdicts_total{outcome="refused_by_guard",reason="numbers"}')
    ask(aligned, "e2e reasons", "What is the status of order 48213?")
    assert ask(aligned, "e2e reasons", "What is the status of order 48231?")[1] == "MISS"
    ask(aligned, "e2e reasons 2", "How do I install numpy?")
    assert ask(aligned, "e2e reasons 2", "How do I install numpy on a laptop?")[1] == "MISS"
    after = verdicts(aligned)
    assert after["refused_by_guard"]["numbers"] == before["refused_by_guard"]["numbers"] + 1
    assert after["refused_by_verifier"]["added_words"] == before["refused_by_verifier"]["added_words"] + 1
    assert sorted(after["refused_by_guard"]) == ["added_words", "cross_score", "dates", "entity", "low_score",
                                                 "negation", "numbers", "swapped_words"]
    assert metric(aligned, 'pion_serve_l1_verdicts_total{outcome="refused_by_guard",reason="numbers"}') == \
        m_before + 1
    assert metric(aligned, 'pion_serve_l1_verdicts_total{outcome="refused_by_verifier",reason="added_words"}') >= 1


def test_the_default_guard_counts_its_refusals_under_the_guard(guarded: ProxyProcess) -> None:
    before = verdicts(guarded)
    assert (before["verifier"], before["verifier_ready"]) == ("guard", True)
    ask(guarded, "e2e guard", "How do I change my profile picture?")
    assert ask(guarded, "e2e guard", "How can I update my profile photo?")[1] == "MISS"
    after = verdicts(guarded)
    refused = {k: after["refused_by_guard"][k] - before["refused_by_guard"][k] for k in after["refused_by_guard"]}
    assert refused == {"numbers": 0, "dates": 0, "negation": 0, "entity": 0, "added_words": 0, "swapped_words": 1,
                       "low_score": 0, "cross_score": 0}
    assert after["refused_by_verifier"] == before["refused_by_verifier"]
