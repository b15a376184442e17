"""Facts written differently (issue 18, sixth round): what the spelling rules change in the
L1 hard checks, before (another source tree, e.g. main's) vs after (this tree).

Per split and kind: paraphrases refused by the numbers/dates checks, numbers_dates traps
caught by the numbers/dates checks, and all traps caught by any hard check, before -> after.
The "before" verdicts come from a child process that runs this script with ``--dump`` and
the other tree's ``src`` first on its path, so both versions read the same items.

Splits: ``train``, ``dev``, ``test``, ``test2`` and ``test3`` are spent (scored in earlier
rounds; the lead's rule for this round lets us read them and look at their failures).
``test4`` and ``test5`` are the lead's fresh held-out splits: ``refuse_unspent`` refuses them
before any file is opened.

    python benchmarks/fact_spellings_eval.py --before-src /work/main/src
    python benchmarks/fact_spellings_eval.py --before-src /work/main/src --show test2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from semantic_eval_splits import SPENT_SPLITS, refuse_unspent  # benchmarks/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
FACT_REASONS = ("numbers", "dates")


def _verdicts(splits: Sequence[str], src: str) -> list[dict[str, object]]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from semantic_cache_eval import load_items  # puts this tree's src first on the path

    # the verifier under test comes from ``src`` (this tree's, or the --before-src tree's)
    for name in [m for m in sys.modules if m == "pion" or m.startswith("pion.")]:
        del sys.modules[name]
    sys.path.insert(0, src)
    from pion.proxy.verifier import Verifier

    verifier = Verifier()
    verifier.load()
    heldout = [s for s in splits if s not in ("train", "dev", "test")]
    out: list[dict[str, object]] = []
    for it in load_items(heldout):
        if it.split not in splits:
            continue
        v = verifier.hard_check(it.b, it.a)
        out.append({"split": it.split, "kind": it.kind, "category": it.category, "hit": it.hit,
                    "a": it.a, "b": it.b, "ok": v.ok, "reason": v.reason, "detail": v.detail})
    return out


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({n / d:.1%})" if d else "-"


def table(before: list[dict[str, object]], after: list[dict[str, object]], splits: Sequence[str]) -> None:
    print("\n| split | kind | paraphrases refused by numbers/dates | numbers_dates traps caught by numbers/dates "
          "| numbers_dates traps caught (any hard check) | all traps caught (any hard check) |")
    print("|---|---|---|---|---|---|")
    for split in splits:
        for kind in ("pair", "conversation"):
            idx = [i for i, r in enumerate(after) if r["split"] == split and r["kind"] == kind]
            if not idx:
                continue
            cols = []
            for pred, base in (
                (lambda r: not r["ok"] and r["reason"] in FACT_REASONS, lambda r: r["hit"]),
                (lambda r: not r["ok"] and r["reason"] in FACT_REASONS, lambda r: r["category"] == "numbers_dates"),
                (lambda r: not r["ok"], lambda r: r["category"] == "numbers_dates"),
                (lambda r: not r["ok"], lambda r: not r["hit"]),
            ):
                sel = [i for i in idx if base(after[i])]
                b = sum(1 for i in sel if pred(before[i]))
                a = sum(1 for i in sel if pred(after[i]))
                cols.append(f"{_pct(b, len(sel))} → {_pct(a, len(sel))}")
            print(f"| {split} | {kind} | " + " | ".join(cols) + " |")


def show(before: list[dict[str, object]], after: list[dict[str, object]], split: str) -> None:
    for b, a in zip(before, after, strict=True):
        if a["split"] != split or b["ok"] == a["ok"]:
            continue
        what = "LIFTED" if a["ok"] else "NEWLY REFUSED"
        kind = "paraphrase" if a["hit"] else f"TRAP {a['category']}"
        print(f"  {what} [{a['kind']} {kind}] {a['a']!r} / {a['b']!r}: {b['detail'] or a['detail']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--splits", nargs="+", default=list(SPENT_SPLITS))
    parser.add_argument("--before-src", help="the src directory of the code to compare against (e.g. main's)")
    parser.add_argument("--dump", help="print the verdicts of the code in this src directory as JSON (for --before-src)")
    parser.add_argument("--show", help="list the verdicts that changed on this spent split")
    args = parser.parse_args()
    refuse_unspent(args.splits + ([args.show] if args.show else []))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.dump:
        json.dump(_verdicts(args.splits, args.dump), sys.stdout)
        return
    after = _verdicts(args.splits, str(ROOT / "src"))
    if args.before_src:
        proc = subprocess.run([sys.executable, __file__, "--dump", args.before_src, "--splits", *args.splits],
                              check=True, capture_output=True, text=True)
        before = json.loads(proc.stdout)
    else:
        before = after
    table(before, after, args.splits)
    if args.show:
        show(before, after, args.show)


if __name__ == "__main__":
    main()
