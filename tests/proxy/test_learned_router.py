"""``--route-classifier``: a learned route model from ``pion serve-tools train-router`` in pion-serve.

Unit tests of the model file (round trip, refusal of anything but plain arrays), of the tier
mapping (the centroid classifier's margin and heuristics around a learned score) and of the
cross-validated training; then end to end: the real CLI trains on labelled questions embedded
with the real MiniLM, and pion-serve with two OpenAI-compatible test backends sends a question
the model marks hard to the strong tier.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pion.common.errors import ConfigError
from pion.proxy.learned_router import LearnedRouteModel, load_model
from pion.proxy.route_training import train
from pion.proxy.router import LearnedClassifier
from pion.proxy.tools.train_router import read_labelled
from support.fake_backends import FakeBackend, running
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder


def _axis_model(threshold: float = 0.5, margin: float = 0.05) -> LearnedRouteModel:
    """A 4-dim logistic model scoring sigmoid(8 * x0) of the unit vector: x0 = +1 -> 0.9997, -1 -> 0.0003."""
    coef = np.array([8.0, 0.0, 0.0, 0.0], np.float32)
    return LearnedRouteModel(kind="logreg", dim=4, coef=coef, threshold=threshold, margin=margin,
                             meta={"candidate": "axis"})


def test_a_saved_model_scores_every_query_the_same_after_loading(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(30, 6)).astype(np.float32)
    texts = [f"question number {i} with {i * 7} apples?" for i in range(30)]
    y = vecs[:, 0] > 0
    model = train(vecs, texts, np.ones(30, bool), ~y, folds=3).model
    model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert (loaded.kind, loaded.dim, loaded.stats, loaded.k, loaded.threshold, loaded.margin) == (
        model.kind, model.dim, model.stats, model.k, model.threshold, 0.0)
    assert np.allclose(loaded.scores(vecs, texts), model.scores(vecs, texts), atol=1e-3)


def test_training_puts_exactly_the_hard_cluster_above_the_threshold() -> None:
    rng = np.random.default_rng(7)
    hard = rng.normal(size=(40, 8)) + np.array([4.0] + [0.0] * 7)
    easy = rng.normal(size=(40, 8)) - np.array([4.0] + [0.0] * 7)
    vecs = np.vstack([hard, easy]).astype(np.float32)
    texts = ["Prove it step by step."] * 40 + ["What is it?"] * 40
    needs = np.array([True] * 40 + [False] * 40)
    result = train(vecs, texts, np.ones(80, bool), ~needs, strong_share=0.5, folds=4)
    # perfectly ranked out of fold: accuracy 0.5 + share up to 50 % strong calls, then 1.0
    assert result.cv_score == pytest.approx(np.mean([0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0, 1.0, 1.0]))
    assert list(result.model.scores(vecs, texts) > result.model.threshold) == list(needs)
    assert result.model.meta["strong_share"] == 0.5


def test_learned_score_maps_to_tiers_with_the_margin_and_the_heuristics() -> None:
    clf = LearnedClassifier(_axis_model(0.5, margin=0.05))
    long_q = "Tell me about it " + "really " * 60
    cases = {"hard": ("Please do this long piece of work now", [1.0, 0, 0, 0]),
             "easy": ("What is this one simple thing here?", [-1.0, 0, 0, 0]),
             "edge": ("Something right on the edge of the threshold", [0.005, 1.0, 0, 0]),
             "short": ("Do it", [1.0, 0, 0, 0]), "long": (long_q, [-1.0, 0, 0, 0])}
    got = {k: clf.classify(t, np.array(v, np.float32)) for k, (t, v) in cases.items()}
    assert {k: (d.tier, d.heuristic_boost) for k, d in got.items()} == {
        "hard": ("complex", ""), "easy": ("simple", ""), "edge": ("medium", ""),
        "short": ("medium", "short_query"), "long": ("medium", "long_query")}
    assert (got["hard"].confidence, got["easy"].confidence) == (0.9997, 0.9997)
    code = clf.classify("```python\nprint(1)\n```", np.array([-1.0, 0, 0, 0], np.float32))
    assert (code.tier, code.heuristic_boost) == ("complex", "code")
    none = clf.classify("What is this one simple thing here?", None)
    assert (none.tier, none.classified, none.heuristic_boost) == ("medium", False, "no_embedding")


def test_a_vector_of_another_dimension_is_refused_by_the_model() -> None:
    with pytest.raises(ValueError, match="embedding has 3 dimensions, the route classifier 4"):
        _axis_model().scores(np.zeros((1, 3), np.float32), ["x"])


def test_a_file_holding_a_pickled_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.npz"
    np.savez(path, header=np.array([{"format": "pion-route-classifier/1"}], dtype=object))
    with pytest.raises(ConfigError, match="is not a route classifier file"):
        load_model(path)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda h: h | {"format": "other/1"}, "format is not 'pion-route-classifier/1'"),
    (lambda h: h | {"kind": "forest"}, "kind 'forest' is not one of logreg, knn, blend"),
    (lambda h: h | {"stats": ["log_chars", "moon_phase"]}, "unknown text statistic"),
    (lambda h: h | {"dim": 5}, "coef has shape (4,), expected (5,)"),
    (lambda h: h | {"margin": 1.5}, "margin must be in [0, 1)"),
])
def test_a_malformed_model_file_is_a_config_error_naming_the_problem(tmp_path: Path, mutate: object,
                                                                     message: str) -> None:
    model = _axis_model()
    model.save(tmp_path / "ok.npz")
    with np.load(tmp_path / "ok.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["header"] = np.array(json.dumps(mutate(json.loads(str(arrays["header"])))))  # type: ignore[operator]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_model(tmp_path / "bad.npz")


def test_a_missing_or_garbage_model_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(ConfigError, match="is not a route classifier file"):
        load_model(tmp_path / "junk.npz")
    with pytest.raises(ConfigError, match="cannot read"):
        load_model(tmp_path / "absent.npz")


@pytest.mark.parametrize(("line", "message"), [
    ('{"prompt": "x"}', "needs a boolean 'needs_strong', or booleans 'strong_correct' and 'weak_correct'"),
    ('{"prompt": "", "needs_strong": true}', "needs a non-empty 'prompt' or 'question'"),
    ("[1, 2]", "a row must be a JSON object"),
    ("{oops", "not JSON"),
])
def test_bad_labelled_rows_are_refused_with_their_line_number(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "fine", "needs_strong": false}\n' + line + "\n")
    with pytest.raises(ValueError, match=f"data.jsonl:2: {message}"):
        read_labelled(path)


def test_labelled_data_with_one_label_only_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"question": f"q{i}?", "needs_strong": False}) + "\n" for i in range(12)))
    with pytest.raises(ValueError, match="every row has the same label; nothing to learn"):
        read_labelled(path)


def test_route_classifier_without_route_is_a_config_error() -> None:
    from pion.proxy.config import ServeConfig

    with pytest.raises(ConfigError, match="route_classifier: needs --route"):
        ServeConfig(route_classifier="m.npz")


# --- end to end: train-router CLI -> pion-serve --route --route-classifier ---

HARD = [
    "Prove that the sum of two odd integers is even.", "Show that there is no largest prime number.",
    "Derive the formula for the sum of a geometric series.",
    "Prove by induction that 1 + 2 + ... + n equals n(n+1)/2.",
    "Find all real solutions of x^4 - 5x^2 + 4 = 0 and justify each step.",
    "Prove that every bounded monotone sequence of real numbers converges.",
    "Show that the square root of 2 is irrational.",
    "Compute the integral of x times e^x from 0 to 1, showing your work.",
    "Prove that a group of prime order is cyclic.",
    "Determine the eigenvalues of a 3x3 rotation matrix and explain their meaning.",
    "Prove the triangle inequality for complex numbers.", "Show that the harmonic series diverges.",
    "Solve the recurrence T(n) = 2T(n/2) + n and prove the bound.",
    "Prove that the product of two consecutive integers is even.",
    "Derive the quadratic formula by completing the square.", "Show that every finite integral domain is a field.",
    "Prove that there are infinitely many primes of the form 4k + 3.",
    "Find the limit of (1 + 1/n)^n as n goes to infinity and prove it exists.",
    "Prove that the determinant of a product of matrices is the product of determinants.",
    "Show that a continuous function on a closed interval attains its maximum.",
]
EASY = [
    "What is the capital of Germany?", "Who painted the Mona Lisa?", "What color is a banana?",
    "How many continents are there?", "What is the tallest mountain in the world?", "Who wrote Hamlet?",
    "What language is spoken in Brazil?", "What is the largest ocean on Earth?", "How many hours are in a day?",
    "What is the chemical symbol for gold?", "Which planet is known as the red planet?",
    "What is the currency of Japan?", "Who was the first man on the moon?", "What is the capital of Canada?",
    "How many legs does a cat have?", "What is the freezing point of water in Celsius?",
    "Which animal is known as the king of the jungle?", "What is the main ingredient of guacamole?",
    "In which country is the Eiffel Tower?", "What is the opposite of hot?",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("train-router")
    data = tmp / "labelled.jsonl"
    data.write_text("".join(json.dumps({"prompt": q, "needs_strong": q in HARD}) + "\n" for q in HARD + EASY))
    out = tmp / "route.npz"
    proc = subprocess.run([sys.executable, "-m", "pion.cli", "serve-tools", "train-router", str(data),
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cheap() -> Iterator[FakeBackend]:
    yield from running("openai")


@pytest.fixture(scope="module")
def strong() -> Iterator[FakeBackend]:
    yield from running("openai")


@pytest.fixture(scope="module")
def learned_proxy(shared_pion_server: ServerProcess, trained: tuple[Path, dict], cheap: FakeBackend,
                  strong: FakeBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    tmp = tmp_path_factory.mktemp("learned-route")
    config = tmp / "routing.json"
    config.write_text(json.dumps({
        "simple": {"backend": "vllm", "model": "weak-model", "base_url": cheap.url},
        "medium": {"backend": "vllm", "model": "mid-model", "base_url": strong.url},
        "complex": {"backend": "vllm", "model": "strong-model", "base_url": strong.url},
    }))
    p = start_proxy(tmp, "--backend", "vllm", "--backend-url", strong.url, "--route", "--route-config", str(config),
                    "--route-classifier", str(trained[0]), *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        yield p
    finally:
        p.stop()


def _ask(proxy: ProxyProcess, question: str) -> tuple[str, dict]:
    completion = proxy.openai().chat.completions.create(
        model="client-model",
        messages=[{"role": "system", "content": "learned"}, {"role": "user", "content": question}])
    return completion.model or "", completion.model_extra["x_pion"]


def test_train_router_writes_a_model_file_and_reports_its_choice(trained: tuple[Path, dict]) -> None:
    path, report = trained
    model = load_model(path)
    assert (report["rows"], report["out"], report["strong_share"], report["margin"], model.dim) == (
        40, str(path), 0.5, 0.0, 384)
    assert report["threshold"] == round(model.threshold, 6)
    assert model.meta["embedder"] == "all-MiniLM-L6-v2"


def test_a_question_the_classifier_marks_hard_goes_to_the_strong_tier(learned_proxy: ProxyProcess,
                                                                       cheap: FakeBackend, strong: FakeBackend) -> None:
    calls = (cheap.state.calls, strong.state.calls)
    model, x = _ask(learned_proxy, "Prove that the square root of 3 is irrational.")
    assert (model, x["source"], x["route"]["tier"], x["route"]["classifier"]) == (
        "strong-model", "full_inference", "complex", "learned")
    assert strong.state.last_body["model"] == "strong-model"
    model, x = _ask(learned_proxy, "What is the capital of Portugal?")
    assert (model, x["route"]["tier"], x["route"]["classifier"]) == ("weak-model", "simple", "learned")
    assert (cheap.state.calls, strong.state.calls) == (calls[0] + 1, calls[1] + 1)


def test_stats_say_the_learned_classifier_ran(learned_proxy: ProxyProcess, trained: tuple[Path, dict]) -> None:
    _ask(learned_proxy, "Show that the cube root of 2 is irrational.")
    doc = learned_proxy.stats()["intent_router"]
    assert (doc["classifier"], doc["learned"]["file"], doc["learned"]["dim"], doc["learned"]["dim_mismatch"]) == (
        "learned", str(trained[0]), 384, 0)
    assert doc["learned"]["candidate"] == trained[1]["classifier"]
    assert doc["classified_total"] == doc["simple"] + doc["medium"] + doc["complex"]


def test_pion_serve_with_a_corrupt_route_classifier_exits_with_status_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    proc = subprocess.run([sys.executable, "-m", "pion.proxy.main", "--route", "--route-classifier", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"route_classifier: '{bad}' is not a route classifier file" in proc.stderr
