"""Intent routing on real outcomes: answer accuracy vs share of queries sent to the strong model.

Data: ``/work/shared/data/router/`` (RouteLLM's released per-question correctness of GPT-4
(strong) and Mixtral (weak) on GSM8K and MMLU; see its README). A router that sends a
query to the strong model scores ``strong_correct``, else ``weak_correct``.

Routers compared on the same held-out test split:
  * **centroid**: pion-serve's ``--route`` classifier exactly (``pion.proxy.router``: the
    20 + 20 seed centroids, the code / short / long heuristics); simple -> weak, medium and
    complex -> strong. The margin is swept to trace a curve; margin 0.05 is the default.
  * **random**: a random fraction x to strong, expected accuracy weak + x (strong - weak).
  * **learned**: ``pion serve-tools train-router``'s training (``pion.proxy.route_training.train``)
    run on the *train* split only: logistic regression on the MiniLM embedding (+ none / four /
    ten text statistics), kNN over the train split's embeddings (share of "needs strong" among
    the k nearest), and blends of the two; target ("weak wrong" or "only strong right"), C, k
    and the blend weight are all picked by 5-fold cross-validation on the train split
    (criterion: mean accuracy over 10-60 % strong calls of the out-of-fold scores). The winner
    is refit on train and its score threshold swept on test; the best plain logistic model of
    the same CV is shown next to it. The winner is also scored as pion-serve runs it
    (``--route-classifier``: threshold at 50 % strong calls on train, the file's margin 0, the
    spec's heuristics; medium and complex -> strong). For MMLU a logistic variant that also sees the
    subject label is reported separately (a deployment may know the topic; the prompt alone
    does not say).

The split is fixed before anything is fitted: a seeded permutation, 60 % train / 40 % test
(``SPLIT_SEED``), never changed after seeing results. Test rows are never used to fit or
pick anything.

    PYTHONPATH=src python benchmarks/router_eval.py [--png docs/img/router_eval.png]

Embeddings come from ``router_embed_cache.py`` (cached under /tmp/pion-router-emb).
"""

from __future__ import annotations

import argparse
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from router_embed_cache import DEFAULT_OUT, cached_embeddings, load_rows

from pion.proxy import route_training
from pion.proxy.router import COMPLEX_SEEDS, SIMPLE_SEEDS, CentroidClassifier, LearnedClassifier

SPLIT_SEED = 17
TRAIN_SHARE = 0.6
SHARES = (0.2, 0.3, 0.4, 0.5)
MARGINS = tuple(np.round(np.arange(-0.30, 0.301, 0.01), 3))


@dataclass
class Split:
    strong: np.ndarray  # bool per row
    weak: np.ndarray
    x: np.ndarray       # features
    idx: np.ndarray     # row indices into the data set


def accuracy(to_strong: np.ndarray, s: Split) -> float:
    return float(np.where(to_strong, s.strong, s.weak).mean())


def curve_from_scores(scores: np.ndarray, s: Split) -> list[tuple[float, float]]:
    """(share to strong, accuracy) when the top-k scored queries go to strong, k = 0..n."""
    order = np.argsort(-scores, kind="stable")
    gain = (s.strong.astype(float) - s.weak.astype(float))[order]
    base = s.weak.mean()
    n = len(scores)
    acc = base + np.concatenate([[0.0], np.cumsum(gain)]) / n
    return [(k / n, float(acc[k])) for k in range(n + 1)]


def at_share(curve: list[tuple[float, float]], share: float) -> float:
    """Accuracy of the curve point with the largest share not above ``share``."""
    best = max((p for p in curve if p[0] <= share + 1e-9), key=lambda p: p[0])
    return best[1]


def centroid_points(prompts: list[str], vecs: np.ndarray, seeds: np.ndarray, s: Split) -> list[tuple[float, float, float]]:
    """(margin, share strong, accuracy) of the --route classifier per margin."""
    out = []
    for m in MARGINS:
        clf = CentroidClassifier.from_seed_vectors(seeds[:20], seeds[20:], float(m))
        tiers = [clf.classify(prompts[i], vecs[i]).tier for i in s.idx]
        to_strong = np.array([t != "simple" for t in tiers])
        out.append((float(m), float(to_strong.mean()), accuracy(to_strong, s)))
    return out


TARGETS = {"weak_wrong": lambda s: ~s.weak, "only_strong_right": lambda s: s.strong & ~s.weak}
CS = (0.01, 0.1, 1.0)


def text_stats(prompts: list[str]) -> np.ndarray:
    """Cheap difficulty signals: log length, count of numbers, sentences, question marks."""
    rows = [[np.log1p(len(p)), np.log1p(len(re.findall(r"\d+(?:\.\d+)?", p))),
             np.log1p(len(re.findall(r"[.!?](?:\s|$)", p))), float(p.count("?"))] for p in prompts]
    x = np.asarray(rows, np.float32)
    return (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)


def mean_acc(scores: np.ndarray, s: Split) -> float:
    curve = curve_from_scores(scores, s)
    return float(np.mean([at_share(curve, sh) for sh in np.arange(0.10, 0.601, 0.05)]))


def pick_and_fit(train: Split, feats: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    """5-fold CV on the train split over feature sets x targets x C; refit the best on train."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    best = None
    for fname, x_all in feats.items():
        x = x_all[train.idx]
        for tname, target in TARGETS.items():
            y = target(train)
            for c in CS:
                oof = np.zeros(len(y))
                for fit_i, val_i in StratifiedKFold(5, shuffle=True, random_state=SPLIT_SEED).split(x, y):
                    m = LogisticRegression(C=c, max_iter=2000).fit(x[fit_i], y[fit_i])
                    oof[val_i] = m.predict_proba(x[val_i])[:, 1]
                score = mean_acc(oof, train)
                if best is None or score > best[0]:
                    best = (score, fname, tname, c)
    assert best is not None
    score, fname, tname, c = best
    model = LogisticRegression(C=c, max_iter=2000).fit(feats[fname][train.idx], TARGETS[tname](train))
    return model, fname, tname, c, score


def split_rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    cut = int(round(n * TRAIN_SHARE))
    return np.sort(perm[:cut]), np.sort(perm[cut:])


def evaluate(name: str, emb_dir: Path, seeds: np.ndarray) -> dict:
    rows = load_rows(name)
    vecs = cached_embeddings(name, emb_dir)
    prompts = [r["prompt"] for r in rows]
    strong = np.array([r["strong_correct"] for r in rows])
    weak = np.array([r["weak_correct"] for r in rows])
    tr, te = split_rows(len(rows))
    stats = text_stats(prompts)
    feats = {"embedding": vecs, "embedding+text-stats": np.hstack([vecs, stats])}
    variants = {"prompt only": feats}
    if name == "mmlu":
        subjects = sorted({r["subject"] for r in rows})
        onehot = np.zeros((len(rows), len(subjects)), np.float32)
        for i, r in enumerate(rows):
            onehot[i, subjects.index(r["subject"])] = 1.0
        variants["with subject label"] = {"embedding+text-stats+subject": np.hstack([vecs, stats, onehot])}
    test = Split(strong[te], weak[te], vecs[te], te)
    result: dict = {"set": name, "rows": len(rows), "train": len(tr), "test": len(te),
                    "strong_only": float(test.strong.mean()), "weak_only": float(test.weak.mean()),
                    "oracle": float((test.strong | test.weak).mean()),
                    "oracle_share": float((test.strong & ~test.weak).mean())}
    result["centroid"] = centroid_points(prompts, vecs, seeds, test)
    result["logreg"] = {}
    train = Split(strong[tr], weak[tr], vecs[tr], tr)
    tr_prompts, te_prompts = [prompts[i] for i in tr], [prompts[i] for i in te]
    fitted = route_training.train(vecs[tr], tr_prompts, strong[tr], weak[tr], strong_share=0.5,
                                  embedder="all-MiniLM-L6-v2", log=lambda line: print(f"{name} {line}", flush=True))
    cv = dict(fitted.ranked)
    plain = fitted.best_of("logreg")
    plain_model = route_training.fit(plain, vecs[tr], tr_prompts, strong[tr], weak[tr])
    for label, cand, model in (("prompt only, logistic", plain, plain_model),
                               ("prompt only, train-router (CV winner)", fitted.best, fitted.model)):
        result["logreg"][label] = {"features": cand.label(), "cv_mean_acc": cv[cand],
                                   "curve": curve_from_scores(model.scores(vecs[te], te_prompts), test)}
    served = LearnedClassifier(fitted.model)
    to_strong = np.array([served.classify(prompts[i], vecs[i]).tier != "simple" for i in te])
    result["served"] = {"share": float(to_strong.mean()), "accuracy": accuracy(to_strong, test),
                        "threshold": fitted.model.threshold}
    for variant, vfeats in variants.items():
        if variant == "prompt only":
            continue
        model, fname, tname, c, cvs = pick_and_fit(train, vfeats)
        scores = model.predict_proba(vfeats[fname][te])[:, 1]
        result["logreg"][variant] = {"features": f"logreg({fname}, C={c:g}, target={tname})", "cv_mean_acc": cvs,
                                     "curve": curve_from_scores(scores, test)}
    return result


def table(results: list[dict]) -> str:
    lines = ["| set (test rows) | router | " + " | ".join(f"acc @ {int(s * 100)}% strong" for s in SHARES)
             + " | strong-only | weak-only | oracle |", "|---" * (5 + len(SHARES)) + "|"]
    for r in results:
        rand = [r["weak_only"] + s * (r["strong_only"] - r["weak_only"]) for s in SHARES]
        cen_curve = sorted((p[1], p[2]) for p in r["centroid"])
        rows = [("random (expected)", rand),
                ("centroid --route (margin sweep)", [at_share([(0.0, r["weak_only"])] + cen_curve, s) for s in SHARES])]
        for variant, lr in r["logreg"].items():
            rows.append((f"learned, {variant}: {lr['features']}", [at_share(lr["curve"], s) for s in SHARES]))
        for label, accs in rows:
            lines.append(f"| {r['set']} ({r['test']}) | {label} | " + " | ".join(f"{a * 100:.1f}%" for a in accs)
                         + f" | {r['strong_only'] * 100:.1f}% | {r['weak_only'] * 100:.1f}% | "
                         f"{r['oracle'] * 100:.1f}% @ {r['oracle_share'] * 100:.0f}% |")
    return "\n".join(lines)


def default_margin_line(results: list[dict]) -> str:
    out = []
    for r in results:
        m = min(r["centroid"], key=lambda p: abs(p[0] - 0.05))
        out.append(f"{r['set']}: centroid router at the default margin 0.05 sends {m[1] * 100:.1f}% to strong, "
                   f"accuracy {m[2] * 100:.1f}% (random at that share: "
                   f"{(r['weak_only'] + m[1] * (r['strong_only'] - r['weak_only'])) * 100:.1f}%)")
    return "\n".join(out)


def target_line(results: list[dict]) -> str:
    out = []
    for r in results:
        sv = r["served"]
        out.append(f"{r['set']} served (--route-classifier, threshold {sv['threshold']:.4f}, margin 0, heuristics): "
                   f"{sv['share'] * 100:.1f}% to strong, accuracy {sv['accuracy'] * 100:.1f}% "
                   f"({sv['accuracy'] / r['strong_only'] * 100:.1f}% of strong-only)")
        goal = 0.95 * r["strong_only"]
        for fname, lr in r["logreg"].items():
            ok = [p for p in lr["curve"] if p[1] >= goal]
            first = min(ok, key=lambda p: p[0]) if ok else None
            out.append(f"{r['set']} learned[{fname}]: 95% of strong-only = {goal * 100:.1f}% reached at "
                       + (f"{first[0] * 100:.1f}% strong calls" if first else "no share"))
    return "\n".join(out)


def plot(results: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5))
    for ax, r in zip(np.atleast_1d(axes), results):
        xs = np.linspace(0, 1, 11)
        ax.plot(xs * 100, (r["weak_only"] + xs * (r["strong_only"] - r["weak_only"])) * 100, "k--", label="random")
        cen = sorted((p[1], p[2]) for p in r["centroid"])
        ax.plot([c[0] * 100 for c in cen], [c[1] * 100 for c in cen], "o-", ms=3, label="centroid --route (margin sweep)")
        for fname, lr in r["logreg"].items():
            c = lr["curve"]
            ax.plot([p[0] * 100 for p in c], [p[1] * 100 for p in c], label=f"learned ({fname})")
        ax.axhline(r["strong_only"] * 100, color="grey", lw=0.8)
        ax.axhline(0.95 * r["strong_only"] * 100, color="grey", lw=0.8, ls=":", label="95% of strong-only")
        ax.plot([r["oracle_share"] * 100], [r["oracle"] * 100], "r*", ms=10, label="oracle")
        ax.set_title(f"{r['set'].upper()} (held-out test, {r['test']} questions)")
        ax.set_xlabel("% of queries sent to the strong model (GPT-4)")
        ax.set_ylabel("accuracy %")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--emb-dir", type=Path, default=DEFAULT_OUT)
    p.add_argument("--png", type=Path, default=Path("docs/img/router_eval.png"))
    p.add_argument("--json", type=Path, default=None, help="write the raw curves here")
    p.add_argument("--sets", nargs="*", default=["gsm8k", "mmlu"])
    args = p.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)
    from pion.server.semantic.embedder import MiniLMEmbedder

    seeds = MiniLMEmbedder().encode(list(SIMPLE_SEEDS + COMPLEX_SEEDS))
    results = [evaluate(name, args.emb_dir, seeds) for name in args.sets]
    print(table(results))
    print()
    print(default_margin_line(results))
    print(target_line(results))
    plot(results, args.png)
    if args.json:
        args.json.write_text(json.dumps(results))
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
