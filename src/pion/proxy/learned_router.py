"""A learned route classifier: scores how likely a query needs the strong tier, from a model file.

The spec's centroid classifier (``router.py``) asks "is this a simple question?"; on real
strong/weak outcomes (docs/benchmarks.md, intent routing) that is close to random. This module
scores the question a router should ask, "will the cheap model get this wrong?", with a model
fitted on labelled outcomes (``pion serve-tools train-router``, ``route_training.py``):

* ``logreg``: logistic regression on the query's embedding plus cheap text statistics;
* ``knn``: the share of "needs strong" among the k nearest labelled queries (cosine);
* ``blend``: ``w * logreg + (1 - w) * knn``.

The model file is an ``.npz`` of plain arrays plus one JSON header (``np.load`` with
``allow_pickle=False``: loading a file never runs code). The score is mapped to a tier the way
the centroid classifier maps its diff: ``diff = threshold - score``; above the model's
``margin`` simple, below ``-margin`` complex, else medium (the margin is the file's, in score
units, 0 by default: ``--route-margin`` is the centroids' cosine margin); the spec's
heuristics (code -> complex, short complex -> medium, long simple -> medium) and the
no-embedding fallback (medium) apply unchanged.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pion.common.errors import ConfigError

FORMAT = "pion-route-classifier/1"
KINDS = ("logreg", "knn", "blend")

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
_MATH = re.compile(r"[=+*/^<>()%$]|\\frac|\bsqrt\b")
_NEGATION = re.compile(r"\b(?:not|except|false|least|incorrect|never|cannot)\b", re.IGNORECASE)
_OPTION = re.compile(r"^[A-D][.)]\s*(.*)$", re.MULTILINE)

# Four basic statistics (the first feature set of the evaluation) and six more.
BASIC_STATS = ("log_chars", "log_numbers", "log_sentences", "question_marks")
EXTRA_STATS = ("log_words", "log_math_symbols", "negations", "mean_word_len", "log_longest_option",
               "newlines")
STAT_NAMES = BASIC_STATS + EXTRA_STATS


def text_stats(texts: list[str]) -> np.ndarray:
    """(n, len(STAT_NAMES)) raw difficulty signals of each text; standardised by the model."""
    rows = []
    for t in texts:
        words = t.split()
        options = _OPTION.findall(t)
        rows.append([
            np.log1p(len(t)), np.log1p(len(_NUMBER.findall(t))), np.log1p(len(_SENTENCE_END.findall(t))),
            float(t.count("?")),
            np.log1p(len(words)), np.log1p(len(_MATH.findall(t))), float(len(_NEGATION.findall(t))),
            float(np.mean([len(w) for w in words])) if words else 0.0,
            np.log1p(max((len(o) for o in options), default=0)), float(t.count("\n")),
        ])
    return np.asarray(rows, np.float32).reshape(len(texts), len(STAT_NAMES))


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


def knn_scores(queries: np.ndarray, vectors: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Mean label of the ``k`` most cosine-similar rows of ``vectors`` for each query row."""
    sims = unit_rows(queries) @ unit_rows(vectors).T
    k = max(1, min(k, vectors.shape[0]))
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    return np.asarray(labels, np.float32)[top].mean(axis=1)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -50.0, 50.0))), np.float32)


@dataclass(frozen=True)
class LearnedRouteModel:
    """The fitted parameters; ``scores`` is pure numpy so pion-serve needs no scikit-learn."""

    kind: str
    dim: int
    stats: tuple[str, ...] = ()
    stat_mean: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    stat_std: np.ndarray = field(default_factory=lambda: np.ones(0, np.float32))
    coef: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    intercept: float = 0.0
    knn_vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float16))
    knn_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    k: int = 0
    blend: float = 1.0
    threshold: float = 0.5
    margin: float = 0.0  # half-width of the medium band around the threshold, in score units
    meta: dict[str, Any] = field(default_factory=dict)

    def features(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        """The logistic model's inputs: unit embedding rows, then the standardised statistics."""
        parts = [unit_rows(vectors)]
        if self.stats:
            idx = [STAT_NAMES.index(s) for s in self.stats]
            parts.append((text_stats(texts)[:, idx] - self.stat_mean) / self.stat_std)
        return np.hstack(parts)

    def scores(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        """Per query, the estimated probability that it needs the strong tier."""
        vectors = np.asarray(vectors, np.float32).reshape(len(texts), -1)
        if vectors.shape[1] != self.dim:
            raise ValueError(f"embedding has {vectors.shape[1]} dimensions, the route classifier {self.dim}")
        out = np.zeros(len(texts), np.float32)
        if self.kind in ("logreg", "blend"):
            lr = _sigmoid(self.features(vectors, texts) @ self.coef + self.intercept)
            out += (self.blend if self.kind == "blend" else 1.0) * lr
        if self.kind in ("knn", "blend"):
            nn = knn_scores(vectors, self.knn_vectors.astype(np.float32), self.knn_labels, self.k)
            out += (1.0 - self.blend if self.kind == "blend" else 1.0) * nn
        return out

    def header(self) -> dict[str, Any]:
        return {"format": FORMAT, "kind": self.kind, "dim": self.dim, "stats": list(self.stats),
                "intercept": self.intercept, "k": self.k, "blend": self.blend, "threshold": self.threshold,
                "margin": self.margin, "meta": self.meta}

    def save(self, path: str | Path) -> None:
        """Write the model as an ``.npz`` of plain arrays (no pickled objects)."""
        with open(path, "wb") as f:
            np.savez_compressed(
                f, header=np.array(json.dumps(self.header())), stat_mean=self.stat_mean.astype(np.float32),
                stat_std=self.stat_std.astype(np.float32), coef=self.coef.astype(np.float32),
                knn_vectors=self.knn_vectors.astype(np.float16), knn_labels=self.knn_labels.astype(np.float32))


def load_model(path: str | Path) -> LearnedRouteModel:
    """Read a file written by ``LearnedRouteModel.save``; anything malformed is a ``ConfigError``."""
    where = f"route_classifier: {str(path)!r}"
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"{where} is not a route classifier file: {exc}") from exc
    needed = {"header", "stat_mean", "stat_std", "coef", "knn_vectors", "knn_labels"}
    if not needed <= set(arrays):
        raise ConfigError(f"{where} is not a route classifier file (missing {sorted(needed - set(arrays))[0]!r})")
    try:
        head = json.loads(str(arrays["header"]))
    except ValueError as exc:
        raise ConfigError(f"{where}: bad header: {exc}") from exc
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ConfigError(f"{where}: format is not {FORMAT!r}")
    kind, dim, stats = head.get("kind"), head.get("dim"), head.get("stats")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(dim, int) or dim <= 0:
        raise ConfigError(f"{where}: dim must be a positive integer")
    if not isinstance(stats, list) or any(s not in STAT_NAMES for s in stats):
        raise ConfigError(f"{where}: unknown text statistic in {stats!r}")
    model = LearnedRouteModel(
        kind=kind, dim=dim, stats=tuple(stats), stat_mean=arrays["stat_mean"], stat_std=arrays["stat_std"],
        coef=arrays["coef"], intercept=float(head.get("intercept", 0.0)), knn_vectors=arrays["knn_vectors"],
        knn_labels=arrays["knn_labels"], k=int(head.get("k", 0)), blend=float(head.get("blend", 1.0)),
        threshold=float(head.get("threshold", 0.5)), margin=float(head.get("margin", 0.0)),
        meta=dict(head.get("meta") or {}))
    _check_shapes(model, where)
    return model


def _check_shapes(m: LearnedRouteModel, where: str) -> None:
    if m.kind in ("logreg", "blend"):
        if m.coef.shape != (m.dim + len(m.stats),):
            raise ConfigError(f"{where}: coef has shape {m.coef.shape}, expected ({m.dim + len(m.stats)},)")
        if m.stat_mean.shape != (len(m.stats),) or m.stat_std.shape != (len(m.stats),):
            raise ConfigError(f"{where}: stat_mean/stat_std do not match the {len(m.stats)} statistics")
    if m.kind in ("knn", "blend"):
        if m.knn_vectors.ndim != 2 or m.knn_vectors.shape[1] != m.dim or m.knn_vectors.shape[0] == 0:
            raise ConfigError(f"{where}: knn_vectors must be a non-empty (n, {m.dim}) array")
        if m.knn_labels.shape != (m.knn_vectors.shape[0],):
            raise ConfigError(f"{where}: knn_labels must hold one label per knn vector")
        if m.k < 1:
            raise ConfigError(f"{where}: k must be >= 1")
    if not 0.0 <= m.margin < 1.0:
        raise ConfigError(f"{where}: margin must be in [0, 1)")
    if not 0.0 <= m.blend <= 1.0:
        raise ConfigError(f"{where}: blend must be in [0, 1]")
    if not all(np.isfinite(a).all() for a in (m.coef, m.stat_mean, m.stat_std, m.knn_labels)):
        raise ConfigError(f"{where}: non-finite parameters")
