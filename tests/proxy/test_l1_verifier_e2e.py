"""L1 verification and conversation scope through a real pion-serve and pion-server.

openai SDK -> pion-serve (``--verifier aligned`` and the default guard) -> the small
OpenAI-compatible test backend; L1 lives in a real pion-server that embeds with MiniLM,
and the aligned verifier loads WordNet, hence ``slow``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess
from support.verifier_e2e import ask, check_reworded_question_served, metric, verdicts, verifier_proxy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def aligned(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    with verifier_proxy(tmp_path_factory.mktemp("aligned"), fake_openai, shared_pion_server,
                        "--verifier", "aligned", "--cache-threshold", "0.8") as p:
        yield p


@pytest.fixture(scope="module")
def guarded(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    with verifier_proxy(tmp_path_factory.mktemp("guarded"), fake_openai, shared_pion_server) as p:
        yield p


def test_a_synonym_paraphrase_is_served_by_the_aligned_verifier(aligned: ProxyProcess) -> None:
    check_reworded_question_served(aligned, "e2e synonyms", "How do I change my profile picture?",
                                   "How can I update my profile photo?")


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
    assert ask(aligned, "e2e reasons 2", "How do I install numpy on my laptop?")[1] == "MISS"
    after = verdicts(aligned)
    assert after["refused_by_guard"]["numbers"] == before["refused_by_guard"]["numbers"] + 1
    assert after["refused_by_verifier"]["added_words"] == before["refused_by_verifier"]["added_words"] + 1
    assert sorted(after["refused_by_guard"]) == ["added_words", "cross_score", "dates", "entity", "low_score",
                                                 "negation", "numbers", "polarity", "scope", "swapped_words"]
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
                       "low_score": 0, "cross_score": 0, "polarity": 0, "scope": 0}
    assert after["refused_by_verifier"] == before["refused_by_verifier"]
