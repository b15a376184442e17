"""Nearest-neighbour search inside one semantic-cache scope.

Every scope keeps its unit-norm vectors in one contiguous float32 matrix, so the exact
search is a single matrix-vector product. Above ``ann_min_entries`` live rows an ANN
graph (usearch or hnswlib, chosen by ``benchmarks/bench_semantic.py --ann``) answers
instead; its candidates are re-scored against the exact matrix so the similarity a
client sees is always the true cosine.
"""

from __future__ import annotations

import logging
import sys
from typing import Protocol

import numpy as np

logger = logging.getLogger(__name__)

# Measured in benchmarks/bench_semantic.py: below this the exact product is fast enough
# (and exact); above it hnswlib answers in ~0.4 ms at recall@1 1.000 (100K entries).
DEFAULT_ANN_MIN_ENTRIES = 10_000
ANN_CANDIDATES = 4


class AnnIndex(Protocol):
    """The three verbs a graph index must offer; ids are our entry ids."""

    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None: ...

    def remove(self, entry_id: int) -> None: ...

    def candidates(self, query: np.ndarray, k: int) -> list[int]: ...


class UsearchAnn:
    """usearch HNSW with inner-product metric."""

    def __init__(self, dim: int) -> None:
        from usearch.index import Index

        self._index = Index(ndim=dim, metric="ip", dtype="f32", connectivity=16,
                            expansion_add=128, expansion_search=64)

    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        self._index.add(ids.astype(np.uint64), vecs)

    def remove(self, entry_id: int) -> None:
        self._index.remove(entry_id)

    def candidates(self, query: np.ndarray, k: int) -> list[int]:
        matches = self._index.search(query, k)
        return [int(key) for key in matches.keys]


class HnswlibAnn:
    """hnswlib HNSW with inner-product space; grows its capacity by doubling."""

    def __init__(self, dim: int) -> None:
        import hnswlib  # type: ignore[import-untyped,unused-ignore]

        self._index = hnswlib.Index(space="ip", dim=dim)
        self._capacity = 1024
        self._index.init_index(max_elements=self._capacity, ef_construction=128, M=16,
                               allow_replace_deleted=False)
        self._index.set_ef(64)
        self._count = 0
        self._live = 0

    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        need = self._count + len(ids)
        if need > self._capacity:
            while self._capacity < need:
                self._capacity *= 2
            self._index.resize_index(self._capacity)
        self._index.add_items(vecs, ids.astype(np.int64), num_threads=1)
        self._count = need
        self._live += len(ids)

    def remove(self, entry_id: int) -> None:
        self._index.mark_deleted(entry_id)
        self._live -= 1

    def candidates(self, query: np.ndarray, k: int) -> list[int]:
        labels, _ = self._index.knn_query(query, k=max(1, min(k, self._live)), num_threads=1)
        return [int(x) for x in labels[0]]


ANN_KINDS: dict[str, type[UsearchAnn] | type[HnswlibAnn]] = {"usearch": UsearchAnn, "hnswlib": HnswlibAnn}


def make_ann_index(kind: str, dim: int) -> AnnIndex:
    """Build an empty ANN index of ``kind`` ('usearch' | 'hnswlib')."""
    try:
        cls = ANN_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown ANN index kind {kind!r}") from None
    return cls(dim)


class ScopeIndex:
    """Vectors of one (cache, scope): exact search, switching to ANN above a size.

    Rows are appended; a removed entry leaves a hole (id -1) that ``compact`` squeezes
    out once holes are half the matrix.
    """

    def __init__(self, dim: int, ann_kind: str = "hnswlib",
                 ann_min_entries: int = DEFAULT_ANN_MIN_ENTRIES) -> None:
        self.dim = dim
        self._vecs = np.empty((16, dim), dtype=np.float32)
        self._ids = np.full(16, -1, dtype=np.int64)
        self._rows = 0
        self._live = 0
        self._row_of: dict[int, int] = {}
        self._ann_kind = ann_kind
        self._ann_min = ann_min_entries
        self._ann: AnnIndex | None = None

    def __len__(self) -> int:
        return self._live

    @property
    def uses_ann(self) -> bool:
        return self._ann is not None

    def add(self, entry_id: int, vec: np.ndarray) -> None:
        """Append one unit-norm vector under ``entry_id`` (ids are never reused)."""
        if self._rows == len(self._ids):
            grow = len(self._ids) * 2
            self._vecs = np.resize(self._vecs, (grow, self.dim))
            ids = np.full(grow, -1, dtype=np.int64)
            ids[: self._rows] = self._ids[: self._rows]
            self._ids = ids
        self._vecs[self._rows] = vec
        self._ids[self._rows] = entry_id
        self._row_of[entry_id] = self._rows
        self._rows += 1
        self._live += 1
        if self._ann is not None:
            self._ann.add(np.array([entry_id]), vec.reshape(1, -1))
        elif self._live >= self._ann_min:
            self._build_ann()

    def remove(self, entry_id: int) -> bool:
        row = self._row_of.pop(entry_id, None)
        if row is None:
            return False
        self._ids[row] = -1
        self._live -= 1
        if self._ann is not None:
            self._ann.remove(entry_id)
        if self._rows > 64 and self._live * 2 < self._rows:
            self._compact()
        return True

    def vector(self, entry_id: int) -> np.ndarray:
        """The stored unit-norm vector of ``entry_id`` (a view; KeyError if absent)."""
        vec: np.ndarray = self._vecs[self._row_of[entry_id]]
        return vec

    def search(self, query: np.ndarray) -> tuple[int, float] | None:
        """Best (entry_id, cosine) for a unit-norm ``query``, or None when empty."""
        if self._live == 0:
            return None
        if self._ann is not None:
            rows = [self._row_of[i] for i in self._ann.candidates(query, ANN_CANDIDATES)
                    if i in self._row_of]
            if rows:
                sims = self._vecs[rows] @ query
                best = int(np.argmax(sims))
                return int(self._ids[rows[best]]), float(sims[best])
        sims = self._vecs[: self._rows] @ query
        sims[self._ids[: self._rows] < 0] = -np.inf
        row = int(np.argmax(sims))
        return int(self._ids[row]), float(sims[row])

    def _build_ann(self) -> None:
        try:
            ann = make_ann_index(self._ann_kind, self.dim)
        except ImportError:
            # A core install (no [embed] extra) has no graph library: stay exact, which is correct,
            # only slower above ann_min_entries (docs/operations.md, "Installable parts").
            logger.warning("semantic index: %s is not installed (the [embed] extra); scopes above %d "
                           "entries keep using exact search", self._ann_kind, self._ann_min)
            self._ann_min = sys.maxsize
            return
        live = self._ids[: self._rows] >= 0
        ann.add(self._ids[: self._rows][live], self._vecs[: self._rows][live])
        self._ann = ann

    def _compact(self) -> None:
        live = self._ids[: self._rows] >= 0
        vecs, ids = self._vecs[: self._rows][live].copy(), self._ids[: self._rows][live].copy()
        cap = max(16, len(ids) * 2)
        self._vecs = np.empty((cap, self.dim), dtype=np.float32)
        self._vecs[: len(ids)] = vecs
        self._ids = np.full(cap, -1, dtype=np.int64)
        self._ids[: len(ids)] = ids
        self._rows = len(ids)
        self._row_of = {int(i): r for r, i in enumerate(ids)}
