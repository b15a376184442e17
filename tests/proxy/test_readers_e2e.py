"""The polarity and scope readers through a real pion-serve and pion-server (issue 18,
sixth round): a trap they refuse goes to the backend and is counted under its reason in
``/v1/stats`` and ``/metrics``, and the paraphrase of the same question is still served.

openai SDK -> pion-serve (``--verifier aligned``: the readers are part of the hard checks
every verifier runs, and aligned loads only WordNet) -> the small OpenAI-compatible test
backend; L1 in a real pion-server embedding with MiniLM, hence ``slow``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess
from support.verifier_e2e import ask, metric, verdicts, verifier_proxy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def aligned(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    with verifier_proxy(tmp_path_factory.mktemp("readers"), fake_openai, shared_pion_server,
                        "--verifier", "aligned", "--cache-threshold", "0.8") as p:
        yield p


def _refused_by_guard(proxy: ProxyProcess, reason: str) -> tuple[int, float]:
    line = f'pion_serve_l1_verdicts_total{{outcome="refused_by_guard",reason="{reason}"}}'
    return verdicts(proxy)["refused_by_guard"][reason], metric(proxy, line)


def test_a_scope_trap_is_refused_and_counted_and_its_paraphrase_served(aligned: ProxyProcess) -> None:
    system = "e2e readers scope"
    first, h1 = ask(aligned, system, "How do I pause my Velo bike plan?")
    before = _refused_by_guard(aligned, "scope")
    trap_answer, h2 = ask(aligned, system, "How do I pause my Velo bike plan as a student?")
    assert (h1, h2, trap_answer.endswith("as a student?")) == ("MISS", "MISS", True)
    assert _refused_by_guard(aligned, "scope") == (before[0] + 1, before[1] + 1)
    served_before = verdicts(aligned)["served"]
    answer, h3 = ask(aligned, system, "How can I pause my Velo bike plan?")
    assert (h3, answer, verdicts(aligned)["served"]) == ("HIT", first, served_before + 1)


def test_a_polarity_trap_is_refused_and_counted_under_polarity(aligned: ProxyProcess) -> None:
    system = "e2e readers polarity"
    ask(aligned, system, "How do I set up direct deposit for my Velo refund?")
    before = _refused_by_guard(aligned, "polarity")
    answer, header = ask(aligned, system, "How do I get a paper check for my Velo refund instead of direct deposit?")
    assert (header, answer.endswith("instead of direct deposit?")) == ("MISS", True)
    assert _refused_by_guard(aligned, "polarity") == (before[0] + 1, before[1] + 1)


def test_the_new_reasons_are_listed_even_before_any_refusal(aligned: ProxyProcess) -> None:
    stats = verdicts(aligned)
    assert {"polarity", "scope"} <= set(stats["refused_by_guard"]) & set(stats["refused_by_verifier"])
