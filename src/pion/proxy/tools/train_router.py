"""``pion serve-tools train-router``: labelled queries in, a ``--route-classifier`` model file out.

Input: JSONL rows with the query in ``prompt`` (or ``question``) and either both outcomes
(``strong_correct``, ``weak_correct``: did the strong / weak model answer it right; RouteLLM's
released evaluation format) or one boolean ``needs_strong``. The queries are embedded with the
MiniLM model pion-server's embedder uses (the vector space pion-serve routes in by default),
or read from ``--embeddings`` (an ``.npy``, one row per input row). ``route_training.train``
picks the classifier by cross-validation and sets the threshold so ``--strong-share`` of the
training queries score above it; the model is written as ``.npz`` (no pickle).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

EMBEDDER = "all-MiniLM-L6-v2"


def read_labelled(path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(texts, strong_correct, weak_correct) of a labelled JSONL file; a bad row raises ValueError."""
    texts: list[str] = []
    strong: list[bool] = []
    weak: list[bool] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row: Any = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: a row must be a JSON object")
            text = row.get("prompt", row.get("question"))
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{path}:{n}: needs a non-empty 'prompt' or 'question'")
            if isinstance(row.get("needs_strong"), bool):
                s, w = True, not row["needs_strong"]
            elif isinstance(row.get("strong_correct"), bool) and isinstance(row.get("weak_correct"), bool):
                s, w = row["strong_correct"], row["weak_correct"]
            else:
                raise ValueError(f"{path}:{n}: needs a boolean 'needs_strong', or booleans "
                                 "'strong_correct' and 'weak_correct'")
            texts.append(text)
            strong.append(s)
            weak.append(w)
    if len(texts) < 10:
        raise ValueError(f"{path}: {len(texts)} labelled rows; at least 10 are needed")
    target = np.array(strong) & ~np.array(weak)
    if target.all() or not target.any():
        raise ValueError(f"{path}: every row has the same label; nothing to learn")
    return texts, np.array(strong), np.array(weak)


def embed(texts: list[str], embeddings: Path | None) -> np.ndarray:
    if embeddings is not None:
        vecs = np.load(embeddings, allow_pickle=False)
        if vecs.ndim != 2 or vecs.shape[0] != len(texts):
            raise ValueError(f"{embeddings}: shape {vecs.shape}, expected ({len(texts)}, dim)")
        return np.asarray(vecs, np.float32)
    from pion.server.semantic.embedder import MiniLMEmbedder

    return MiniLMEmbedder().encode(texts)


def run(data: Path, out: Path, *, strong_share: float, folds: int, embeddings: Path | None,
        margin: float = 0.0) -> int:
    from pion.proxy.route_training import train

    if not 0.0 < strong_share < 1.0:
        raise ValueError(f"--strong-share {strong_share} is not between 0 and 1")
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"--margin {margin} is not in [0, 1)")
    texts, strong, weak = read_labelled(data)
    vecs = embed(texts, embeddings)
    result = train(vecs, texts, strong, weak, strong_share=strong_share, margin=margin, folds=min(folds, len(texts)),
                   embedder=EMBEDDER if embeddings is None else str(embeddings),
                   log=lambda line: print(line, file=sys.stderr))
    result.model.save(out)
    print(json.dumps({"out": str(out), "rows": len(texts), "classifier": result.best.label(),
                      "cv_mean_routed_accuracy": round(result.cv_score, 4),
                      "threshold": round(result.model.threshold, 6), "margin": margin,
                      "strong_share": strong_share}))
    return 0
