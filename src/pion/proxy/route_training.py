"""Fit a learned route classifier from labelled queries, choosing everything by cross-validation.

Used by ``pion serve-tools train-router`` and by ``benchmarks/router_eval.py`` (which calls
``train`` on its train split only and scores the result on its held-out test split), so the
benchmark measures exactly what the tool writes.

A labelled row is a query with the outcome of both tiers (``strong_correct``, ``weak_correct``:
RouteLLM's released format) or one boolean ``needs_strong`` (read as strong right, weak right
unless it needs strong). Candidates: logistic regression (embedding, plus none / four / all
text statistics; target "weak wrong" or "only strong right"; C), kNN (target, k) and blends of
the best of each. Every candidate is scored on k-fold out-of-fold predictions with one
criterion, the mean routed accuracy over 10-60 % strong calls; the winner is refit on all rows.
The threshold is the score above which ``strong_share`` of the training rows fall.

scikit-learn (installed with the ``embed`` extra's sentence-transformers) is needed here only;
pion-serve reads the result with numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pion.proxy.learned_router import BASIC_STATS, STAT_NAMES, LearnedRouteModel, knn_scores, text_stats, unit_rows

TARGETS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "weak_wrong": lambda strong, weak: ~weak,
    "only_strong_right": lambda strong, weak: strong & ~weak,
}
STAT_SETS: dict[str, tuple[str, ...]] = {"none": (), "basic": BASIC_STATS, "all": STAT_NAMES}
CS = (0.01, 0.1, 1.0)
KS = (10, 25, 50, 100, 200)
BLENDS = (0.25, 0.5, 0.75)
SHARES = tuple(np.round(np.arange(0.10, 0.601, 0.05), 2))


@dataclass(frozen=True)
class Candidate:
    kind: str
    target: str
    stats: str = "none"
    c: float = 0.0
    k: int = 0
    blend: float = 1.0

    def label(self) -> str:
        if self.kind == "logreg":
            return f"logreg(stats={self.stats}, C={self.c:g}, target={self.target})"
        if self.kind == "knn":
            return f"knn(k={self.k}, target={self.target})"
        return (f"blend({self.blend:g} x logreg(stats={self.stats}, C={self.c:g}) + knn(k={self.k}), "
                f"target={self.target})")


def routed_accuracy_curve(scores: np.ndarray, strong: np.ndarray, weak: np.ndarray) -> np.ndarray:
    """acc[j] = accuracy when the j highest-scored queries go to strong, j = 0..n."""
    order = np.argsort(-scores, kind="stable")
    gain = (strong.astype(float) - weak.astype(float))[order]
    return np.asarray(weak.mean() + np.concatenate([[0.0], np.cumsum(gain)]) / len(scores))


def mean_routed_accuracy(scores: np.ndarray, strong: np.ndarray, weak: np.ndarray) -> float:
    """The selection criterion: mean accuracy at 10, 15, ... 60 % strong calls."""
    acc = routed_accuracy_curve(scores, strong, weak)
    n = len(scores)
    return float(np.mean([acc[int(np.floor(s * n + 1e-9))] for s in SHARES]))


def _folds(n: int, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    perm = np.random.default_rng(seed).permutation(n)
    parts = np.array_split(perm, k)
    return [(np.sort(np.concatenate(parts[:i] + parts[i + 1:])), np.sort(parts[i])) for i in range(k)]


def _standardiser(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return stats.mean(axis=0), stats.std(axis=0) + 1e-6


def _logreg(x: np.ndarray, y: np.ndarray, c: float) -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=2000).fit(x, y)


def _design(vecs: np.ndarray, stats: np.ndarray, names: tuple[str, ...], mean: np.ndarray,
            std: np.ndarray) -> np.ndarray:
    idx = [STAT_NAMES.index(s) for s in names]
    return np.hstack([vecs, (stats[:, idx] - mean[idx]) / std[idx]]) if names else vecs


@dataclass
class TrainResult:
    model: LearnedRouteModel
    best: Candidate
    cv_score: float
    ranked: list[tuple[Candidate, float]]  # every candidate with its CV criterion, best first

    def best_of(self, kind: str) -> Candidate:
        """The best candidate of one kind (the evaluation shows plain logreg next to the winner)."""
        return next(c for c, _ in self.ranked if c.kind == kind)


def train(vectors: np.ndarray, texts: list[str], strong: np.ndarray, weak: np.ndarray, *,
          strong_share: float = 0.5, margin: float = 0.0, folds: int = 5, seed: int = 17, embedder: str = "",
          log: Callable[[str], None] | None = None) -> TrainResult:
    """Cross-validate every candidate on these rows, refit the best on all of them."""
    vecs = unit_rows(vectors)
    strong, weak = np.asarray(strong, bool), np.asarray(weak, bool)
    stats = text_stats(texts)
    splits = _folds(len(texts), folds, seed)
    oof: dict[Candidate, np.ndarray] = {}
    for tname, target in TARGETS.items():
        y = target(strong, weak)
        for sname, names in STAT_SETS.items():
            for c in CS:
                pred = np.zeros(len(y), np.float32)
                for fit_i, val_i in splits:
                    mean, std = _standardiser(stats[fit_i])
                    m = _logreg(_design(vecs[fit_i], stats[fit_i], names, mean, std), y[fit_i], c)
                    pred[val_i] = m.predict_proba(_design(vecs[val_i], stats[val_i], names, mean, std))[:, 1]
                oof[Candidate("logreg", tname, stats=sname, c=c)] = pred
        for k in KS:
            pred = np.zeros(len(y), np.float32)
            for fit_i, val_i in splits:
                pred[val_i] = knn_scores(vecs[val_i], vecs[fit_i], y[fit_i], k)
            oof[Candidate("knn", tname, k=k)] = pred
    scored = {cand: mean_routed_accuracy(p, strong, weak) for cand, p in oof.items()}
    blends: dict[Candidate, tuple[Candidate, Candidate]] = {}
    for tname in TARGETS:
        lrs = sorted((c for c in scored if c.kind == "logreg" and c.target == tname), key=scored.__getitem__)[-3:]
        nns = sorted((c for c in scored if c.kind == "knn" and c.target == tname), key=scored.__getitem__)[-3:]
        for lr in lrs:
            for nn in nns:
                for w in BLENDS:
                    cand = Candidate("blend", tname, stats=lr.stats, c=lr.c, k=nn.k, blend=w)
                    scored[cand] = mean_routed_accuracy(w * oof[lr] + (1 - w) * oof[nn], strong, weak)
                    blends[cand] = (lr, nn)
    ranking = sorted(scored.items(), key=lambda kv: -kv[1])
    best, cv = ranking[0]
    if log is not None:
        for cand, s in ranking[:10]:
            log(f"cv {s * 100:.2f}%  {cand.label()}")
    model = fit(best, vecs, texts, strong, weak, embedder=embedder)
    # The threshold comes from the out-of-fold scores: on its own rows kNN finds each query itself.
    if best.kind == "blend":
        lr, nn = blends[best]
        best_oof = best.blend * oof[lr] + (1 - best.blend) * oof[nn]
    else:
        best_oof = oof[best]
    threshold = float(np.quantile(best_oof, 1.0 - strong_share)) if 0 < strong_share < 1 else (
        -1.0 if strong_share >= 1 else 2.0)
    meta = dict(model.meta, candidate=best.label(), cv_mean_routed_accuracy=round(cv, 5),
                strong_share=strong_share, rows=len(texts))
    return TrainResult(replace(model, threshold=threshold, margin=margin, meta=meta), best, cv, ranking)


def fit(cand: Candidate, vectors: np.ndarray, texts: list[str], strong: np.ndarray, weak: np.ndarray, *,
        embedder: str = "") -> LearnedRouteModel:
    """The candidate's model fitted on all rows (threshold 0.5 until ``train`` sets it)."""
    vecs = unit_rows(vectors)
    y = TARGETS[cand.target](np.asarray(strong, bool), np.asarray(weak, bool))
    names = STAT_SETS[cand.stats] if cand.kind != "knn" else ()
    stats = text_stats(texts)
    idx = [STAT_NAMES.index(s) for s in names]
    mean, std = _standardiser(stats)
    base = LearnedRouteModel(kind=cand.kind, dim=vecs.shape[1], stats=names, stat_mean=mean[idx],
                             stat_std=std[idx], meta={"embedder": embedder, "target": cand.target})
    if cand.kind in ("logreg", "blend"):
        m = _logreg(_design(vecs, stats, names, mean, std), y, cand.c)
        base = replace(base, coef=m.coef_[0].astype(np.float32), intercept=float(m.intercept_[0]))
    if cand.kind in ("knn", "blend"):
        base = replace(base, knn_vectors=vecs.astype(np.float16), knn_labels=y.astype(np.float32), k=cand.k)
    return replace(base, blend=cand.blend if cand.kind == "blend" else 1.0)
