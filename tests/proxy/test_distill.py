"""pion-serve --distill: L3 concepts (direct and composite) and L3b fragments in pion-server.

End to end: a real pion-server (MiniLM embeddings), the OpenAI-compatible test server and
pion-serve --distill, driven with the openai SDK. Each test uses its own system prompt, so
its entries live in their own scope.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pion.proxy.distill import (DEFAULT_COMPOSITE, DEFAULT_DIRECT, DIRECT_RANGE, MIN_SAMPLES, Calibration, intent_of,
                                parts_of, sentences_of)
from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder


def test_intent_drops_question_framing_and_keeps_what_is_asked() -> None:
    assert [intent_of(q) for q in ("How do I reset my password?", "Could you please tell me the steps to reset "
                                   "my password?", "Reset password steps please", "Resetting passwords?")] == [
        "reset password"] * 4
    assert intent_of("What is it?") == "what is it?"  # nothing but framing: the question itself


def test_a_question_is_split_into_its_parts_only_at_a_new_question() -> None:
    assert parts_of("How do I reset my password and how do I delete my account?") == [
        "How do I reset my password", "how do I delete my account"]
    assert parts_of("Where can I buy salt and pepper?") == ["Where can I buy salt and pepper"]
    assert parts_of("What is the fee? When is it charged?") == ["What is the fee", "When is it charged"]


def test_fragments_are_the_answer_sentences_of_some_length() -> None:
    answer = "Open Settings. Choose Security and then click Reset password. You get an e-mail within 5 minutes."
    assert sentences_of(answer) == ["Choose Security and then click Reset password.",
                                    "You get an e-mail within 5 minutes."]


def test_thresholds_are_the_spec_defaults_until_the_corpus_has_enough_concepts() -> None:
    cal = Calibration()
    cal.samples.extend([0.5] * (MIN_SAMPLES - 1))
    assert (cal.direct, cal.composite, cal.calibrated) == (DEFAULT_DIRECT, DEFAULT_COMPOSITE, False)


def test_thresholds_follow_the_corpus_pairwise_similarity_within_bounds() -> None:
    tight = Calibration()
    tight.samples.extend([0.90] * 100)  # templated FAQ: different questions still close
    diverse = Calibration()
    diverse.samples.extend([0.30] * 100)  # every question on another subject
    assert (tight.direct, tight.composite) == (0.92, round(0.92 - 0.03, 4))
    assert (diverse.direct, diverse.composite) == (DIRECT_RANGE[0], round(DIRECT_RANGE[0] - 0.03, 4))
    assert Calibration(pinned_direct=0.88).direct == 0.88
    assert Calibration(pinned_direct=0.88).composite == 0.85


@pytest.fixture(scope="module")
def distilled(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    p = start_proxy(tmp_path_factory.mktemp("distill"), "--backend", "vllm", "--backend-url", fake_openai.url,
                    "--distill", *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        yield p
    finally:
        p.stop()


def ask(proxy: ProxyProcess, question: str, system: str) -> tuple[str, str, dict]:
    raw = proxy.openai().chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    completion = raw.parse()
    return completion.choices[0].message.content or "", raw.headers["x-pion-cache"], completion.model_extra["x_pion"]


def test_a_paraphrase_l1_misses_is_served_by_l3_direct_with_the_first_answer(distilled: ProxyProcess,
                                                                              fake_openai: FakeBackend) -> None:
    first, _, _ = ask(distilled, "How do I reset my password?", "l3-direct")
    calls = fake_openai.state.calls
    answer, header, x = ask(distilled, "Reset password steps please", "l3-direct")
    assert (answer, header, x["source"]) == (first, "HIT", "l3_direct")
    assert x["similarity"] < 0.85  # L1 alone would have gone to the backend
    assert x["l3_similarity"] >= 0.90
    assert fake_openai.state.calls == calls


def test_a_trap_that_matches_a_concept_is_refused_by_the_guard(distilled: ProxyProcess) -> None:
    ask(distilled, "Reset password steps for order 48213", "l3-trap")
    before = distilled.stats()["l3_concepts"]["guard_rejections"]
    answer, header, x = ask(distilled, "Reset password steps for order 48231", "l3-trap")
    assert (header, x["source"]) == ("MISS", "full_inference")
    assert answer.endswith("Reset password steps for order 48231")
    assert distilled.stats()["l3_concepts"]["guard_rejections"] == before + 1


def test_a_two_part_question_is_answered_from_two_concepts(distilled: ProxyProcess) -> None:
    a1, _, _ = ask(distilled, "How do I reset my password?", "l3-composite")
    a2, _, _ = ask(distilled, "How do I delete my account?", "l3-composite")
    answer, header, x = ask(distilled, "How do I reset my password and how do I delete my account?", "l3-composite")
    assert (header, x["source"]) == ("HIT", "l3_composite")
    assert answer == f"How do I reset my password?\n{a1}\n\nHow do I delete my account?\n{a2}"


def test_a_two_part_question_with_one_unknown_part_goes_to_the_backend(distilled: ProxyProcess) -> None:
    ask(distilled, "How do I reset my password?", "l3-half")
    answer, header, x = ask(distilled, "How do I reset my password and how do I export my invoices?", "l3-half")
    assert (header, x["source"]) == ("MISS", "full_inference")


def test_concepts_are_scoped_like_l1(distilled: ProxyProcess) -> None:
    ask(distilled, "How do I reset my password?", "l3-scope-A")
    _, header, x = ask(distilled, "Reset password steps please", "l3-scope-B")
    assert (header, x["source"]) == ("MISS", "full_inference")


def test_stats_report_the_layers_and_their_calibration(distilled: ProxyProcess) -> None:
    stats = distilled.stats()
    assert stats["distill_enabled"] is True
    c, f = stats["l3_concepts"], stats["l3_fragments"]
    assert list(c) == ["store", "stored", "lookups", "direct_hits", "composite_hits", "guard_rejections",
                       "direct_threshold", "composite_threshold", "threshold_source", "calibration"]
    assert (c["store"], f["store"]) == ("pion-serve:l3", "pion-serve:l3b")
    assert stats["l3_direct"] == c["direct_hits"]
    assert stats["l3_composite"] == c["composite_hits"]
    assert stats["l3_synthesis"] == c["direct_hits"] + c["composite_hits"] + f["hits"]
    assert c["threshold_source"] == ("calibrated" if c["calibration"]["samples"] >= MIN_SAMPLES else "default")
    assert list(c["calibration"]["pairwise_top1"]) == ["p50", "p90", "p95", "p99", "max"]


@pytest.mark.slow  # the server loads MiniLM
def test_concepts_live_in_pion_server_and_survive_a_proxy_restart(shared_pion_server: ServerProcess,
                                                                   fake_openai: FakeBackend, tmp_path: Path) -> None:
    args = ("--backend", "vllm", "--backend-url", fake_openai.url, "--distill", *pion_args(shared_pion_server))
    p = start_proxy(tmp_path, *args)
    try:
        wait_for_embedder(p)
        first, _, _ = ask(p, "How do I reset my password?", "l3-restart")
    finally:
        p.stop()
    p = start_proxy(tmp_path, *args)
    try:
        wait_for_embedder(p)
        answer, header, x = ask(p, "Reset password steps please", "l3-restart")
        assert (answer, x["source"]) == (first, "l3_direct")
    finally:
        p.stop()


def test_pinned_thresholds_come_from_the_flags(shared_pion_server: ServerProcess, fake_openai: FakeBackend,
                                               tmp_path: Path) -> None:
    p = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", fake_openai.url, "--distill",
                    "--l3-direct-threshold", "0.99", "--l3-composite-threshold", "0.95", *pion_args(shared_pion_server))
    try:
        c = p.stats()["l3_concepts"]
        assert (c["direct_threshold"], c["composite_threshold"], c["threshold_source"]) == (0.99, 0.95, "flag")
    finally:
        p.stop()


def test_distill_flags_and_environment_build_the_config() -> None:
    from pion.common.errors import ConfigError
    from pion.proxy.config import load_config

    config = load_config(["--distill", "--l3-direct-threshold", "0.9", "--l3-composite-threshold", "0.8"], env={})
    assert (config.distill, config.l3_direct_threshold, config.l3_composite_threshold) == (True, 0.9, 0.8)
    assert load_config([], env={"PION_SERVE_DISTILL": "yes"}).distill is True
    with pytest.raises(ConfigError) as err:
        load_config(["--l3-direct-threshold", "1.5"], env={})
    assert str(err.value) == "l3_direct_threshold: 1.5 is not between -1 and 1"
