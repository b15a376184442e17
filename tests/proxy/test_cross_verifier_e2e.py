"""``pion-serve --verifier cross`` through real processes: openai SDK -> pion-serve -> the
small OpenAI-compatible test backend, L1 in a real pion-server that embeds with MiniLM;
pion-serve loads WordNet and the cross-encoder for the verifier, hence ``slow``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder
from test_l1_verifier_e2e import ask, metric, verdicts, wait_for_verifier

from pion.proxy.cross_encoder import read_meta

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crossed(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    p = start_proxy(tmp_path_factory.mktemp("cross"), "--backend", "vllm", "--backend-url", fake_openai.url,
                    "--verifier", "cross", "--cache-threshold", str(read_meta().floor), *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        wait_for_verifier(p)
        yield p
    finally:
        p.stop()


def test_stats_name_the_cross_verifier_once_it_is_loaded(crossed: ProxyProcess) -> None:
    assert (verdicts(crossed)["verifier"], verdicts(crossed)["verifier_ready"]) == ("cross", True)


def test_a_reworded_question_is_served_by_the_cross_verifier(crossed: ProxyProcess) -> None:
    first, h1 = ask(crossed, "e2e cross reworded", "How can I change the email address on my Quorbit account?")
    served_before = verdicts(crossed)["served"]
    second, h2 = ask(crossed, "e2e cross reworded", "How do I update my Quorbit account's email address?")
    assert (h1, h2, second) == ("MISS", "HIT", first)
    assert verdicts(crossed)["served"] == served_before + 1


def test_an_added_scope_is_refused_by_the_cross_encoder_and_counted(crossed: ProxyProcess) -> None:
    line = 'pion_serve_l1_verdicts_total{outcome="refused_by_verifier",reason="cross_score"}'
    before, m_before = verdicts(crossed)["refused_by_verifier"]["cross_score"], metric(crossed, line)
    ask(crossed, "e2e cross scope", "How do I delete my Quorbit account?")
    answer, header = ask(crossed, "e2e cross scope", "How do I delete my Quorbit account from the mobile app?")
    assert (header, answer.endswith("How do I delete my Quorbit account from the mobile app?")) == ("MISS", True)
    assert (verdicts(crossed)["refused_by_verifier"]["cross_score"], metric(crossed, line)) == \
        (before + 1, m_before + 1)


def test_a_different_order_number_is_refused_by_the_hard_checks(crossed: ProxyProcess) -> None:
    before = verdicts(crossed)["refused_by_guard"]["numbers"]
    ask(crossed, "e2e cross numbers", "What is the status of order 48213?")
    assert ask(crossed, "e2e cross numbers", "What is the status of order 48231?")[1] == "MISS"
    assert verdicts(crossed)["refused_by_guard"]["numbers"] == before + 1


def test_the_stats_list_the_cross_encoder_reason(crossed: ProxyProcess) -> None:
    assert "cross_score" in verdicts(crossed)["refused_by_verifier"]
