"""``pion-serve --verifier cross`` through real processes: openai SDK -> pion-serve -> the
small OpenAI-compatible test backend, L1 in a real pion-server that embeds with MiniLM;
pion-serve loads WordNet and the cross-encoder for the verifier, hence ``slow``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess
from support.verifier_e2e import (ask, check_refused_and_counted, check_reworded_question_served, verdicts,
                                  verifier_proxy)

from pion.proxy.cross_encoder import read_meta

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crossed(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    with verifier_proxy(tmp_path_factory.mktemp("cross"), fake_openai, shared_pion_server,
                        "--verifier", "cross", "--cache-threshold", str(read_meta().floor)) as p:
        yield p


def test_stats_name_the_cross_verifier_once_it_is_loaded(crossed: ProxyProcess) -> None:
    assert (verdicts(crossed)["verifier"], verdicts(crossed)["verifier_ready"]) == ("cross", True)


def test_a_reworded_question_is_served_by_the_cross_verifier(crossed: ProxyProcess) -> None:
    check_reworded_question_served(crossed, "e2e cross reworded",
                                   "How can I change the email address on my Quorbit account?",
                                   "How do I update my Quorbit account's email address?")


def test_an_added_scope_is_refused_by_the_cross_encoder_and_counted(crossed: ProxyProcess) -> None:
    check_refused_and_counted(crossed, "e2e cross scope", "How do I delete my Quorbit account?",
                              "How do I delete my Quorbit account from the mobile app?", "cross_score")


def test_a_different_order_number_is_refused_by_the_hard_checks(crossed: ProxyProcess) -> None:
    before = verdicts(crossed)["refused_by_guard"]["numbers"]
    ask(crossed, "e2e cross numbers", "What is the status of order 48213?")
    assert ask(crossed, "e2e cross numbers", "What is the status of order 48231?")[1] == "MISS"
    assert verdicts(crossed)["refused_by_guard"]["numbers"] == before + 1


def test_the_stats_list_the_cross_encoder_reason(crossed: ProxyProcess) -> None:
    assert "cross_score" in verdicts(crossed)["refused_by_verifier"]
