"""Where a ``--verifier learned`` hit's time goes, and the traced model pass against the eager one.

    python benchmarks/profile_l1_hit.py [--pairs 60]

For dev paraphrase pairs (the cached question's encoding kept, as pion-serve keeps it):
p50 of each part of ``LearnedVerifier.check``, then the MiniLM pass over the new question
with the TorchScript trace (``token_align._trace_single``, pion-serve's path) and with the
eager transformers model, interleaved in one run so both see the same load, and the
largest difference between their outputs (identical kernels: expected 0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PAIRS = ROOT / "benchmarks" / "data" / "semantic_eval_pairs.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=60)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np

    from pion.proxy import opposites
    from pion.proxy.learned_verifier import LearnedVerifier, pair_features
    from pion.proxy.token_align import TokenEncoder, features

    lv = LearnedVerifier(encoder=TokenEncoder(threads=1))
    lv.load()
    rows = [json.loads(x) for x in PAIRS.read_text().splitlines()]
    pairs = [(r["a"], r["b"]) for r in rows if r["split"] == "dev" and r["category"] == "paraphrase"][: args.pairs]
    lv.encode([a for a, _ in pairs])  # the cached questions, kept
    parts: dict[str, list[float]] = {k: [] for k in (
        "hard checks", "MiniLM pass, traced (pion-serve)", "MiniLM pass, eager", "WordNet alignment + decision",
        "token-alignment features", "opposite-action directions", "whole check (traced pass)")}
    diff = 0.0

    def timed(name: str, fn):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = fn()
        parts[name].append((time.perf_counter() - t0) * 1e3)
        return out

    for a, b in pairs:
        c = lv.encode([a])[0]
        timed("hard checks", lambda: lv.verifier.hard_check(b, a))
        q = timed("MiniLM pass, traced (pion-serve)", lambda: lv.encoder.encode([b])[0])
        e = timed("MiniLM pass, eager", lambda: lv.encoder.encode([b], traced=False)[0])
        diff = max(diff, float(np.abs(q.sentence - e.sentence).max()), float(np.abs(q.ctx - e.ctx).max()))
        timed("WordNet alignment + decision", lambda: lv.verifier.decide(0.9, lv.verifier.align(b, a)))
        timed("token-alignment features", lambda: features(q, c))
        timed("opposite-action directions", lambda: (opposites.actions(b), opposites.actions(a)))
        lv._encoded.pop(b, None)
        timed("whole check (traced pass)", lambda: lv.check(b, a, 0.95))
        lv.weights.score(pair_features(lv.verifier, q, c))
    print(f"\n{len(pairs)} dev paraphrase pairs, cached side kept; p50 ms (load average {os.getloadavg()[0]:.1f})\n")
    print("| part | p50 ms |\n|---|---|")
    for name, values in parts.items():
        print(f"| {name} | {statistics.median(values):.2f} |")
    print(f"\nlargest |traced - eager| over sentence and token vectors: {diff:.2e}")


if __name__ == "__main__":
    main()
