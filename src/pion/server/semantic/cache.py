"""Named semantic caches: entries partitioned by scope, searched by cosine.

A *scope* is a hard partition chosen by the client (pion-serve hashes model, system
prompt, tools and earlier turns into it): a lookup only ever sees entries stored under
the same scope, so similarity never crosses conversations.

All logged state changes go through ``put``, ``delete``, ``flush`` and ``flush_all``;
each hands its record (``SemanticSet``/``SemanticDel``/``SemanticFlush``/
``SemanticFlushAll`` of ``store/records.py``, with every field a replay needs — the
stored vector included, so replay never loads the embedding model) to
``journal.append`` *before* changing anything; when that raises (CommandError MISCONF:
the WAL cannot be written) nothing is changed. Deadlines are absolute unix
milliseconds, so a replayed entry expires when it would have; the TTL purge in
``lookup`` is therefore not logged.

``restore`` and ``iter_entries`` are the replay and snapshot sides
(``SemanticSet.apply``, ``pion.server.persist.binding``). Hit/miss counters are
statistics, not persisted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pion.server.semantic.index import DEFAULT_ANN_MIN_ENTRIES, ScopeIndex
from pion.server.store.journal import Journal, NullJournal
from pion.server.store.records import SemanticDel, SemanticFlush, SemanticFlushAll, SemanticSet

DEFAULT_THRESHOLD = 0.85


@dataclass(slots=True)
class CacheEntry:
    """One stored question and its response."""

    entry_id: int
    scope: str
    text: str
    response: bytes
    meta: bytes | None
    created_at: float
    expires_at: float | None


@dataclass
class NamedCache:
    """One AI.SEMANTIC_CACHE name: its scopes, entries and counters."""

    name: str
    scopes: dict[str, ScopeIndex] = field(default_factory=dict)
    entries: dict[int, CacheEntry] = field(default_factory=dict)
    next_id: int = 1
    hits: int = 0
    misses: int = 0


class SemanticCacheStore:
    """All named caches of one server worker."""

    def __init__(self, ann_kind: str = "hnswlib",
                 ann_min_entries: int = DEFAULT_ANN_MIN_ENTRIES,
                 clock: Callable[[], float] = time.time) -> None:
        self._caches: dict[str, NamedCache] = {}
        self._ann_kind = ann_kind
        self._ann_min = ann_min_entries
        self._clock = clock
        self.journal: Journal = NullJournal()

    @property
    def persisted(self) -> bool:
        """True once persistence has attached its journal (INFO ``persisted``)."""
        return self.journal.durable

    def __len__(self) -> int:
        return sum(len(c.entries) for c in self._caches.values())

    @property
    def n_caches(self) -> int:
        return len(self._caches)

    def check_dim(self, cache: str, scope: str, dim: int) -> str | None:
        """An error message when ``dim`` differs from the scope's vectors, else None."""
        named = self._caches.get(cache)
        index = named.scopes.get(scope) if named else None
        if index is not None and index.dim != dim:
            return f"vector has {dim} dims but this scope holds {index.dim}-dim vectors"
        return None

    def put(self, cache: str, scope: str, text: str, response: bytes, vec: np.ndarray,
            ttl_s: float | None = None, meta: bytes | None = None) -> int:
        """Store an entry; returns its id. ``vec`` must be unit-norm float32."""
        named = self._caches.get(cache)
        entry_id = named.next_id if named is not None else 1
        now = self._clock()
        # The deadline is kept in whole ms so the live entry and a replayed one agree exactly.
        expire_ms = int(round((now + ttl_s) * 1000)) if ttl_s is not None else 0
        vec32 = np.ascontiguousarray(vec, dtype="<f4")
        self.journal.append(SemanticSet(cache, scope, text, response, vec32.tobytes(), expire_ms,
                                        int(now * 1000), meta, entry_id))
        self._insert(cache, CacheEntry(entry_id, scope, text, response, meta, now,
                                       expire_ms / 1000 if expire_ms else None), vec32)
        return entry_id

    def restore(self, cache: str, scope: str, text: str, response: bytes, vec: np.ndarray,
                entry_id: int, expire_at_ms: int, created_ms: int, meta: bytes | None,
                next_id: int | None = None) -> None:
        """Replay one logged ``put`` (same id, same absolute deadline); not logged again.

        An entry with the same id is replaced, so replaying onto a fuzzy (BGSAVE)
        snapshot that already holds it converges. ValueError on a dimension clash.
        """
        named = self._caches.get(cache)
        if named is not None and entry_id in named.entries:
            self._remove(named, entry_id)
        if (problem := self.check_dim(cache, scope, len(vec))) is not None:
            raise ValueError(problem)
        self._insert(cache, CacheEntry(entry_id, scope, text, response, meta, created_ms / 1000,
                                       expire_at_ms / 1000 if expire_at_ms else None), vec)
        named = self._caches[cache]
        named.next_id = max(named.next_id, entry_id + 1, next_id or 0)

    def _insert(self, cache: str, entry: CacheEntry, vec: np.ndarray) -> None:
        named = self._caches.get(cache)
        if named is None:
            named = self._caches[cache] = NamedCache(cache)
        index = named.scopes.get(entry.scope)
        if index is None:
            index = named.scopes[entry.scope] = ScopeIndex(len(vec), self._ann_kind, self._ann_min)
        named.next_id = max(named.next_id, entry.entry_id + 1)
        named.entries[entry.entry_id] = entry
        index.add(entry.entry_id, vec)

    def iter_entries(self) -> Iterator[tuple[str, int, CacheEntry, np.ndarray]]:
        """(cache, next_id, entry, vector) of every live entry, lazily, for snapshots.

        Safe while the store changes between items (a background snapshot yields to
        clients): names and entries are listed first and each is re-checked before it is
        yielded. Entries already past their deadline are left out.
        """
        now = self._clock()
        for name, named in list(self._caches.items()):
            for entry in list(named.entries.values()):
                if self._caches.get(name) is not named or named.entries.get(entry.entry_id) is not entry:
                    continue  # removed since the walk began
                if entry.expires_at is not None and entry.expires_at <= now:
                    continue
                yield name, named.next_id, entry, named.scopes[entry.scope].vector(entry.entry_id)

    def lookup(self, cache: str, scope: str, vec: np.ndarray,
               threshold: float) -> tuple[CacheEntry, float] | None:
        """Best live entry of ``scope`` with cosine >= ``threshold``; counts hit/miss."""
        return self.lookup_best(cache, scope, vec, threshold)[0]

    def lookup_best(self, cache: str, scope: str, vec: np.ndarray, threshold: float
                    ) -> tuple[tuple[CacheEntry, float] | None, float | None]:
        """(hit or None, best live similarity or None when the scope is empty).

        The best similarity is reported on a miss too, so a client can histogram every
        lookup (GET ... WITHBEST), not only those that cleared the threshold.
        """
        named = self._caches.get(cache)
        index = named.scopes.get(scope) if named else None
        found: tuple[CacheEntry, float] | None = None
        best_sim: float | None = None
        if named is not None and index is not None:
            now = self._clock()
            while (best := index.search(vec)) is not None:
                entry = named.entries[best[0]]
                if entry.expires_at is not None and entry.expires_at <= now:
                    self._remove(named, entry.entry_id)
                    continue
                best_sim = best[1]
                if best[1] >= threshold:
                    found = (entry, best[1])
                break
        if named is not None:
            if found is None:
                named.misses += 1
            else:
                named.hits += 1
        return found, best_sim

    def delete(self, cache: str, entry_ids: list[int]) -> int:
        named = self._caches.get(cache)
        if named is None:
            return 0
        present = list(dict.fromkeys(i for i in entry_ids if i in named.entries))
        if present:
            self.journal.append(SemanticDel(cache, present))
        return sum(1 for i in present if self._remove(named, i))

    def flush(self, cache: str) -> int:
        named = self._caches.get(cache)
        if named is None:
            return 0
        self.journal.append(SemanticFlush(cache))
        del self._caches[cache]
        return len(named.entries)

    def flush_all(self) -> int:
        removed = len(self)
        self.journal.append(SemanticFlushAll())
        self._caches.clear()
        return removed

    def info(self, cache: str) -> dict[str, Any]:
        named = self._caches.get(cache) or NamedCache(cache)
        return {
            "name": cache,
            "entries": len(named.entries),
            "scopes": len(named.scopes),
            "ann_scopes": sum(1 for s in named.scopes.values() if s.uses_ann),
            "ann_min_entries": self._ann_min,
            "ann_kind": self._ann_kind,
            "hits": named.hits,
            "misses": named.misses,
            "default_threshold": DEFAULT_THRESHOLD,
            "persisted": int(self.persisted),
        }

    def _remove(self, named: NamedCache, entry_id: int) -> bool:
        entry = named.entries.pop(entry_id, None)
        if entry is None:
            return False
        index = named.scopes[entry.scope]
        index.remove(entry_id)
        if len(index) == 0:
            del named.scopes[entry.scope]
        return True
