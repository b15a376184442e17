"""What the polarity and scope readers add to the L1 hard checks (issue 18, sixth round).

For each split and kind (pairs, conversations): paraphrases the readers newly refuse
(false refusals), traps they newly catch per category, and, with ``--end-to-end``, the
``--verifier cross`` and ``--verifier learned`` figures with the readers off and on
(same items, same embeddings, one run).

Which splits it may read: ``train``, ``dev``, ``test`` and ``test2`` were all scored in
earlier rounds and are *spent* (the lead's rule for this round): the readers were written
while reading their failures (``--show``). ``test3`` is read only when named, as the
round's one end-of-session check of generalisation (``--show`` refuses it). ``test4`` and
``test5`` are the lead's fresh held-out splits: this script refuses them outright
(``check_splits``), before any file is opened.

    python benchmarks/hard_check_eval.py                      # train dev test test2
    python benchmarks/hard_check_eval.py --end-to-end         # + cross / learned, off vs on
    python benchmarks/hard_check_eval.py --show dev           # newly refused paraphrases, traps still served
    python benchmarks/hard_check_eval.py --splits test3 --end-to-end   # the end-of-round check, once
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from semantic_cache_eval import SHOULD_HIT, Item, embed_all, load_items  # noqa: E402
from semantic_eval_splits import refuse_unspent  # noqa: E402

from pion.proxy.verifier import Verifier  # noqa: E402

# The readers were written on these spent splits; test3 (spent too) was their one
# end-of-round check, so it is scored here but never shown.
DEVELOPMENT = ("train", "dev", "test", "test2")


def check_splits(splits: Sequence[str], show: str | None = None) -> None:
    """Refuse the held-out splits this tuning tool must never open, and --show of any
    split the readers were not written on (SystemExit)."""
    refuse_unspent(splits)
    if show is not None and show not in DEVELOPMENT:
        raise SystemExit(f"refusing --show {show}: only the spent splits {list(DEVELOPMENT)} may be shown")


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({n / d:.1%})" if d else "-"


def reader_table(items: list[Item], old: np.ndarray, new: np.ndarray, splits: Sequence[str]) -> None:
    """Per split and kind: paraphrases newly refused, traps newly caught per category."""
    print("\n| split | kind | paraphrases newly refused | traps newly caught, per category |")
    print("|---|---|---|---|")
    for split in splits:
        for kind in ("pair", "conversation"):
            sel = [i for i, it in enumerate(items) if it.split == split and it.kind == kind]
            hits = [i for i in sel if items[i].hit]
            refused = sum(1 for i in hits if old[i] and not new[i])
            lifted = sum(1 for i in hits if new[i] and not old[i])
            cats = sorted({items[i].category for i in sel} - {SHOULD_HIT})
            caught: list[str] = []
            for cat in cats:
                ci = [i for i in sel if items[i].category == cat]
                caught.append(f"{cat} {_pct(sum(1 for i in ci if old[i] and not new[i]), len(ci))}")
            lifted_traps = sum(1 for i in sel if not items[i].hit and new[i] and not old[i])
            lift = f", {lifted} newly passed" if lifted else ""
            if lifted_traps:
                caught.append(f"**{lifted_traps} traps newly passed**")
            print(f"| {split} | {kind} | {_pct(refused, len(hits))}{lift} | {'; '.join(caught)} |")


def reasons(items: list[Item], verifier: Verifier, old: np.ndarray, new: np.ndarray) -> None:
    """Which reader refused what (counts): paraphrases vs traps."""
    counts: Counter[tuple[str, str]] = Counter()
    for it, o, n in zip(items, old, new, strict=True):
        if o and not n:
            counts[(verifier.hard_check(it.b, it.a).reason, "paraphrase" if it.hit else "trap")] += 1
    print("\nnewly refused by reason: " + ", ".join(f"{r} {k} {c}" for (r, k), c in sorted(counts.items())))


def end_to_end(items: list[Item], off: Verifier, on: Verifier, splits: Sequence[str]) -> None:
    """``--verifier cross`` and ``--verifier learned`` served shares, readers off vs on."""
    from semantic_cache_eval import decide_cross, decide_learned

    from pion.proxy.cross_verifier import CrossVerifier
    from pion.proxy.learned_verifier import LearnedVerifier
    from pion.proxy.token_align import TokenEncoder

    encoder = TokenEncoder(threads=1)
    served: dict[str, np.ndarray] = {}
    for name, verifier in (("off", off), ("on", on)):
        learned = LearnedVerifier(verifier=verifier, encoder=encoder)
        served[f"learned, readers {name}"] = decide_learned(items, learned)[0]
        cross = CrossVerifier(verifier=verifier)
        cross.load()
        if cross.learned is not None:
            cross.learned = learned
        served[f"cross, readers {name}"] = decide_cross(items, cross)
    names = list(served)
    print("\n| split | kind | category | items | " + " | ".join(names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    for split in splits:
        for kind in ("pair", "conversation"):
            sel = np.array([it.split == split and it.kind == kind for it in items])
            cat = np.array([it.category for it in items])
            rows = [(c, sel & (cat == c)) for c in sorted(set(cat[sel]))]
            rows += [("**all traps**", sel & (cat != SHOULD_HIT))]
            for label, mask in rows:
                if mask.any():
                    print(f"| {split} | {kind} | {label} | {int(mask.sum())} | "
                          + " | ".join(f"{float(s[mask].mean()):.1%}" for s in served.values()) + " |")


def show(items: list[Item], verifier: Verifier, old: np.ndarray, new: np.ndarray, split: str) -> None:
    """Development view of a spent split: paraphrases the readers refuse, traps that pass
    every hard check."""
    for it, o, n in zip(items, old, new, strict=True):
        if it.split != split:
            continue
        if it.hit and o and not n:
            print(f"  REFUSED [{it.kind}] {it.a!r} / {it.b!r}: {verifier.hard_check(it.b, it.a).detail}")
        elif not it.hit and n and it.category in ("negation", "scope_change", "other_context"):
            print(f"  PASSES  [{it.kind}/{it.category}] {it.a!r} / {it.b!r}")


def latency(items: list[Item], off: Verifier, on: Verifier) -> None:
    """hard_check per item, readers off and on; the readers' token caches are emptied
    first, so every question is read afresh (the worst case: a served entry's question
    is normally cached)."""
    from pion.proxy import polarity, qualifiers

    polarity._tokens.cache_clear()
    qualifiers._tokens.cache_clear()
    for name, verifier in (("readers off", off), ("readers on", on)):
        times = []
        for it in items[:600]:
            t0 = time.perf_counter()
            verifier.hard_check(it.b, it.a)
            times.append((time.perf_counter() - t0) * 1000)
        print(f"hard_check, {name}: p50 {statistics.median(times):.3f} ms, "
              f"p99 {float(np.percentile(times, 99)):.3f} ms over {len(times)} items")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--splits", nargs="+", default=list(DEVELOPMENT))
    parser.add_argument("--show", help="list the readers' refusals and the traps still passing on this spent split")
    parser.add_argument("--end-to-end", action="store_true", help="also score --verifier cross/learned, off vs on")
    args = parser.parse_args()
    check_splits(args.splits, args.show)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    on = Verifier()
    on.load()
    off = Verifier(lexicon=on.lexicon, readers=False)
    heldout = [s for s in args.splits if s not in ("train", "dev", "test")]
    items = [it for it in load_items(heldout) if it.split in args.splits]
    print()
    latency(items, off, on)  # before anything else reads the questions
    old = np.array([off.hard_check(it.b, it.a).ok for it in items])
    new = np.array([on.hard_check(it.b, it.a).ok for it in items])
    reader_table(items, old, new, args.splits)
    reasons(items, on, old, new)
    if args.show:
        show(items, on, old, new, args.show)
    if args.end_to_end:
        embed_all(items)
        end_to_end(items, off, on, args.splits)


if __name__ == "__main__":
    main()
