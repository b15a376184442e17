"""Embed the router evaluation questions once with all-MiniLM-L6-v2 and cache them.

``router_eval.py`` needs a MiniLM vector per question (15,361 of them). On a shared 2-core
CPU that takes minutes, so it is done once and kept in ``.npy`` files next to a sha256 of
the source data; a later run with the same data reuses them.

    PYTHONPATH=src python benchmarks/router_embed_cache.py [--out /tmp/pion-router-emb]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

DATA_DIR = Path("/work/shared/data/router")
DEFAULT_OUT = Path("/tmp/pion-router-emb")
SETS = ("gsm8k", "mmlu")


def load_rows(name: str, data_dir: Path = DATA_DIR) -> list[dict]:
    with open(data_dir / f"{name}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def digest(name: str, data_dir: Path = DATA_DIR) -> str:
    return hashlib.sha256((data_dir / f"{name}.jsonl").read_bytes()).hexdigest()[:16]


def cached_embeddings(name: str, out: Path = DEFAULT_OUT, data_dir: Path = DATA_DIR) -> np.ndarray:
    """(n, 384) float32 unit vectors of the set's prompts; computed on first use."""
    path = out / f"{name}-{digest(name, data_dir)}.npy"
    if path.exists():
        return np.load(path)
    from pion.server.semantic.embedder import MiniLMEmbedder

    rows = load_rows(name, data_dir)
    t0 = time.perf_counter()
    vecs = MiniLMEmbedder().encode([r["prompt"] for r in rows])
    print(f"{name}: embedded {len(rows)} prompts in {time.perf_counter() - t0:.1f} s", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vecs)
    tmp.rename(path)
    return vecs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args()
    for name in SETS:
        print(name, cached_embeddings(name, args.out).shape, flush=True)


if __name__ == "__main__":
    main()
