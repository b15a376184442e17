"""Why L3b served nothing on real model answers: how close a question gets to earlier answer sentences.

For each question of the recorded-answer slice (``distill_faq_smollm2_test.jsonl``, replay
order), the fragments L3b could hold are the sentences (``distill.sentences_of``) of the
answers to the questions before it. This embeds everything with MiniLM (pion-server's model)
and reports, per threshold, how many questions have a fragment at or above it and whether the
best fragment came from an answer of the question's own family (right) or not (wrong). No
guard, no L1/L3 in front: an upper bound on what L3b could serve at that threshold.

    PYTHONPATH=src python benchmarks/l3b_fragment_similarity.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pion.proxy.distill import sentences_of
from pion.server.semantic.embedder import MiniLMEmbedder

DATA = Path(__file__).parent / "data"
THRESHOLDS = (0.95, 0.90, 0.85, 0.80, 0.70, 0.60)


def main() -> None:
    rows = [json.loads(line) for line in (DATA / "distill_faq_smollm2_test.jsonl").read_text().splitlines() if line]
    faq = (DATA / "distill_faq.jsonl").read_text().splitlines()
    order = {json.loads(line)["question"]: i for i, line in enumerate(faq)}
    rows.sort(key=lambda r: order[r["question"]])
    frags = [(i, s) for i, r in enumerate(rows) for s in sentences_of(r["answer"])]
    emb = MiniLMEmbedder()
    q = emb.encode([r["question"] for r in rows])
    f = emb.encode([s for _, s in frags])
    owner = np.array([i for i, _ in frags])
    best: list[tuple[float, bool, str, str]] = []
    for i, r in enumerate(rows):
        mask = owner < i
        if not mask.any():
            continue
        sims = np.where(mask, f @ q[i], -1.0)
        j = int(np.argmax(sims))
        src = rows[owner[j]]["family"]
        best.append((float(sims[j]), src == r["family"], r["question"], frags[j][1]))
    print(f"{len(rows)} questions, {len(frags)} fragments; top-1 question-to-fragment cosine: "
          f"p50 {np.median([b[0] for b in best]):.3f}, max {max(b[0] for b in best):.3f}")
    print("| threshold | questions with a fragment >= it | of which from the same family | from another family |")
    print("|---|---|---|---|")
    for t in THRESHOLDS:
        hit = [b for b in best if b[0] >= t]
        print(f"| {t:.2f} | {len(hit)} | {sum(b[1] for b in hit)} | {sum(not b[1] for b in hit)} |")
    for b in sorted(best, reverse=True)[:5]:
        print(f"  {b[0]:.3f} {'same' if b[1] else 'OTHER'}: {b[2]!r} -> {b[3][:100]!r}")


if __name__ == "__main__":
    main()
