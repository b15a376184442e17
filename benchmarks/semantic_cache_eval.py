"""Does the L1 cache serve wrong answers? Pairwise eval on benchmarks/data/semantic_pairs.jsonl.

Each labelled pair is (cached question ``a``, new question ``b``, same_answer). A pair is
*served* when cosine(MiniLM(a), MiniLM(b)) >= threshold, and, with the guard, when
``pion.proxy.guard.check(b, a)`` also passes. For should-hit pairs (category
paraphrase) serving is right; for traps (negation, numbers, dates, entity_swap,
scope_change) serving is a wrong answer.

    python benchmarks/semantic_cache_eval.py [--threshold 0.85] [--split all|dev|test]
        [--plot docs/img/semantic_threshold_sweep.png] [--show-failures]

Splits: ``dev`` and ``test`` (every third pair per category) were both looked at while the
guard's word lists were written; ``holdout`` (40 pairs) was written afterwards and never
used for tuning.

Prints a markdown table per category and writes the threshold sweep plot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pion.proxy.guard import check  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "semantic_pairs.jsonl"
SHOULD_HIT = "paraphrase"


def load_pairs(split: str) -> list[dict]:
    pairs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    return [p for p in pairs if split == "all" or p["split"] == split]


def cosines(pairs: list[dict]) -> np.ndarray:
    from pion.server.semantic.embedder import MiniLMEmbedder

    embedder = MiniLMEmbedder(threads=1)
    texts = sorted({p["a"] for p in pairs} | {p["b"] for p in pairs})
    vecs = dict(zip(texts, embedder.encode(texts), strict=True))
    return np.array([float(vecs[p["a"]] @ vecs[p["b"]]) for p in pairs])


def served_share(mask: np.ndarray, sel: np.ndarray) -> float:
    return float(mask[sel].mean()) if sel.any() else float("nan")


def report(pairs: list[dict], cos: np.ndarray, guard_ok: np.ndarray, threshold: float) -> None:
    cats = list(dict.fromkeys(p["category"] for p in pairs))
    category = np.array([p["category"] for p in pairs])
    plain = cos >= threshold
    guarded = plain & guard_ok
    print(f"\nThreshold {threshold:.2f}: share of pairs served from the cache\n")
    print("| category | kind | pairs | served, cosine only | served, cosine + guard |")
    print("|---|---|---|---|---|")
    for cat in cats:
        sel = category == cat
        kind = "should hit" if cat == SHOULD_HIT else "trap"
        print(f"| {cat} | {kind} | {int(sel.sum())} | {served_share(plain, sel):.1%} | "
              f"{served_share(guarded, sel):.1%} |")
    hit = category == SHOULD_HIT
    trap = ~hit
    print(f"| **all traps** | trap | {int(trap.sum())} | {served_share(plain, trap):.1%} | "
          f"{served_share(guarded, trap):.1%} |")
    print(f"| **should-hit** | should hit | {int(hit.sum())} | {served_share(plain, hit):.1%} | "
          f"{served_share(guarded, hit):.1%} |")


def sweep_plot(pairs: list[dict], cos: np.ndarray, guard_ok: np.ndarray, out: Path,
               threshold: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hit = np.array([p["category"] == SHOULD_HIT for p in pairs])
    ts = np.linspace(0.5, 1.0, 51)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, ok, style in (("cosine only", np.ones_like(guard_ok), "--"),
                             ("cosine + guard", guard_ok, "-")):
        ax.plot(ts, [((cos >= t) & ok)[hit].mean() for t in ts], style, color="tab:green",
                label=f"should-hit served ({label})")
        ax.plot(ts, [((cos >= t) & ok)[~hit].mean() for t in ts], style, color="tab:red",
                label=f"traps served ({label})")
    ax.axvline(threshold, color="grey", lw=0.8)
    ax.axhline(0.05, color="tab:red", lw=0.5, ls=":")
    ax.set_xlabel("cosine threshold (MiniLM-L6-v2)")
    ax.set_ylabel("share of pairs served from cache")
    ax.set_title(f"pion-serve L1: {int(hit.sum())} should-hit pairs, {int((~hit).sum())} traps")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threshold", type=float, default=0.85)
    parser.add_argument("--split", choices=["all", "dev", "test", "holdout"], default="all")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "semantic_threshold_sweep.png")
    parser.add_argument("--show-failures", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pairs = load_pairs(args.split)
    cos = cosines(pairs)
    verdicts = [check(p["b"], p["a"]) for p in pairs]
    guard_ok = np.array([v.ok for v in verdicts])
    print(f"{len(pairs)} pairs ({args.split} split) from {DATA.relative_to(ROOT)}")
    for split in (["dev", "test", "holdout"] if args.split == "all" else [args.split]):
        sel = [i for i, p in enumerate(pairs) if p["split"] == split]
        print(f"\n### split: {split}")
        report([pairs[i] for i in sel], cos[sel], guard_ok[sel], args.threshold)
    if args.split == "all":
        print("\n### split: all")
        report(pairs, cos, guard_ok, args.threshold)
    if args.show_failures:
        print("\nWrong serves (traps passing cosine + guard) and refused paraphrases:")
        for p, c, v in zip(pairs, cos, verdicts, strict=True):
            if c < args.threshold:
                continue
            if p["category"] != SHOULD_HIT and v.ok:
                print(f"  TRAP SERVED [{p['category']}] {c:.3f} {p['a']!r} / {p['b']!r}")
            if p["category"] == SHOULD_HIT and not v.ok:
                print(f"  REFUSED {c:.3f} {p['a']!r} / {p['b']!r}: {v.reason}")
    if args.plot:
        sweep_plot(pairs, cos, guard_ok, args.plot, args.threshold)


if __name__ == "__main__":
    main()
