"""``pion-serve --verifier learned`` through real processes: openai SDK -> pion-serve ->
the small OpenAI-compatible test backend, L1 in a real pion-server that embeds with
MiniLM; pion-serve loads MiniLM and WordNet for the verifier, hence ``slow``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess
from support.verifier_e2e import (ask, check_refused_and_counted, check_reworded_question_served, verdicts,
                                  verifier_proxy)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def learned(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    with verifier_proxy(tmp_path_factory.mktemp("learned"), fake_openai, shared_pion_server,
                        "--verifier", "learned", "--cache-threshold", "0.65") as p:
        yield p


def test_stats_name_the_learned_verifier_once_it_is_loaded(learned: ProxyProcess) -> None:
    assert (verdicts(learned)["verifier"], verdicts(learned)["verifier_ready"]) == ("learned", True)


def test_a_synonym_paraphrase_is_served_by_the_learned_verifier(learned: ProxyProcess) -> None:
    check_reworded_question_served(learned, "e2e learned synonyms", "How do I change my profile picture?",
                                   "How can I update my profile photo?")


def test_an_added_scope_is_refused_by_the_score_and_counted(learned: ProxyProcess) -> None:
    check_refused_and_counted(learned, "e2e learned scope", "How do I install numpy?",
                              "How do I install numpy on my laptop?", "low_score")


def test_the_question_is_embedded_once_by_the_proxy_not_again_by_the_server(
        learned: ProxyProcess, shared_pion_server: ServerProcess) -> None:
    def server_texts() -> int:
        return int(shared_pion_server.client().info("semantic")["embedder_texts"])

    before = server_texts()
    ask(learned, "e2e learned one pass", "How do I rename a Quorbit workspace?")
    _, header = ask(learned, "e2e learned one pass", "How can I rename my Quorbit workspace?")
    assert (header, server_texts()) == ("HIT", before)


def test_a_different_order_number_is_refused_by_the_hard_checks(learned: ProxyProcess) -> None:
    before = verdicts(learned)["refused_by_guard"]["numbers"]
    ask(learned, "e2e learned numbers", "What is the status of order 48213?")
    assert ask(learned, "e2e learned numbers", "What is the status of order 48231?")[1] == "MISS"
    assert verdicts(learned)["refused_by_guard"]["numbers"] == before + 1
