"""The learned router as pion-serve runs it (``--route-classifier``), per ``--route-margin``.

``router_eval.py`` sweeps the learned score's threshold; pion-serve instead applies the file's
threshold (50 % strong calls on the train split), a margin band that goes to medium and the
spec's heuristics (code -> complex, short complex -> medium, long simple -> medium). This
refits ``router_eval.py``'s CV winner on the same train split (candidate and threshold as it
printed them), then classifies the held-out test split with ``LearnedClassifier`` at several
margins; medium and complex go to the strong model.

    cd benchmarks && PYTHONPATH=../src:. python router_served_eval.py
"""

from __future__ import annotations

import numpy as np

from router_embed_cache import cached_embeddings, load_rows
from router_eval import split_rows

from pion.proxy.route_training import Candidate, fit
from pion.proxy.router import LearnedClassifier
from dataclasses import replace

# router_eval.py's output (2026-11-30): the CV winner on each train split and its threshold.
WINNERS = {
    "gsm8k": (Candidate("blend", "only_strong_right", stats="none", c=0.1, k=50, blend=0.5), 0.2772079408168793),
    "mmlu": (Candidate("blend", "only_strong_right", stats="none", c=0.1, k=25, blend=0.5), 0.16377797722816467),
}
MARGINS = (0.0, 0.01, 0.02, 0.05)


def main() -> None:
    for name, (cand, threshold) in WINNERS.items():
        rows = load_rows(name)
        vecs = cached_embeddings(name)
        tr, te = split_rows(len(rows))
        prompts = [r["prompt"] for r in rows]
        strong = np.array([r["strong_correct"] for r in rows])
        weak = np.array([r["weak_correct"] for r in rows])
        model = replace(fit(cand, vecs[tr], [prompts[i] for i in tr], strong[tr], weak[tr]), threshold=threshold)
        s_only = strong[te].mean()
        for m in MARGINS:
            clf = LearnedClassifier(replace(model, margin=m))
            decisions = [clf.classify(prompts[i], vecs[i]) for i in te]
            to_strong = np.array([d.tier != "simple" for d in decisions])
            acc = np.where(to_strong, strong[te], weak[te]).mean()
            boosts = {b: sum(d.heuristic_boost == b for d in decisions) for b in ("long_query", "short_query", "code")}
            tiers = {t: sum(d.tier == t for d in decisions) for t in ("simple", "medium", "complex")}
            print(f"{name} margin {m:.2f}: {to_strong.mean() * 100:.1f}% to strong, accuracy {acc * 100:.1f}% "
                  f"({acc / s_only * 100:.1f}% of strong-only) tiers {tiers} heuristics {boosts}", flush=True)


if __name__ == "__main__":
    main()
