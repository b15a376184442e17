"""Every FT index of a worker, kept current by watching the keyspace's hashes.

``SearchStore.watch(key, fields)`` is a ``Keyspace.watchers`` callback: each HSET,
HDEL, DEL, expiry and SET over a hash reaches the indexes whose prefixes cover the key
before the command replies, so a search sees every acknowledged write. FLUSHALL drops
every index (``drop_all``, a ``Keyspace.flush_hooks`` entry), as RediSearch does.

Persistence: ``journal.append`` gets an ``FtCreate`` record before an index is created and
an ``FtDropIndex`` before one is dropped (``store/records.py``). The indexes themselves are
never written: recovery runs between ``defer_indexing()`` and ``finish_deferred()``, so
replayed writes only touch the hashes and each index is then built once from them in
bulk (the rebuild, timed in ``build_seconds``; FT.INFO shows it as
``total_indexing_time`` in ms).
"""

from __future__ import annotations

import logging
import time

from pion.common.errors import CommandError
from pion.server.search.index import SearchIndex
from pion.server.search.schema import parse_create
from pion.server.store.journal import Journal, NullJournal
from pion.server.store.keyspace import Hash, Keyspace
from pion.server.store.records import FtCreate, FtDropIndex

log = logging.getLogger("pion.search")


class SearchStore:
    """Index name -> SearchIndex, fed by the keyspace."""

    def __init__(self, keyspace: Keyspace) -> None:
        self.keyspace = keyspace
        self.indexes: dict[str, SearchIndex] = {}
        self.journal: Journal = NullJournal()
        self.build_seconds: dict[str, float] = {}
        self._deferred = False
        self._loaded: set[str] = set()  # restored from a snapshotted graph during recovery
        keyspace.watchers.append(self.watch)
        keyspace.flush_hooks.append(self.drop_all)

    def watch(self, key: bytes, fields: Hash | None) -> None:
        for name, index in self.indexes.items():
            # While deferred only SKIPINITIALSCAN indexes (a scan at the end could not tell
            # which hashes they held) and graph-restored ones follow the replay.
            if ((not self._deferred or index.definition.skip_initial_scan or name in self._loaded)
                    and index.covers(key)):
                index.update(key, fields)

    def get(self, name: str) -> SearchIndex:
        index = self.indexes.get(name)
        if index is None:
            raise CommandError(f"{name}: no such index")
        return index

    def create(self, name: str, args: list[bytes]) -> SearchIndex:
        """Parse, log, then build the index over the hashes already under its prefixes."""
        if name in self.indexes:
            raise CommandError("Index already exists")
        definition = parse_create(name, args)
        index = SearchIndex(definition)  # before logging: may refuse (HNSW without hnswlib)
        self.journal.append(FtCreate(name, list(args)))
        self.indexes[name] = index
        if not definition.skip_initial_scan and not self._deferred:
            self._build(index)
        return index

    def _build(self, index: SearchIndex) -> None:
        started = time.perf_counter()
        index.bulk_load([(key, value) for key, value, _ in list(self.keyspace.items())
                         if isinstance(value, dict) and index.covers(key)])
        self.build_seconds[index.name] = time.perf_counter() - started

    def defer_indexing(self) -> None:
        """Recovery starts: replayed writes skip the indexes until ``finish_deferred``."""
        self._deferred = True

    def finish_deferred(self) -> None:
        """Recovery is done: build every index once from the recovered hashes."""
        self._deferred = False
        loaded, self._loaded = self._loaded, set()
        for name, index in list(self.indexes.items()):
            if name in loaded:
                log.info("FT index %s loaded from its snapshotted graph: %d docs", name, len(index))
                continue
            if index.definition.skip_initial_scan:
                continue
            fresh = SearchIndex(index.definition)
            self.indexes[name] = fresh
            self._build(fresh)
            log.info("FT index %s rebuilt: %d docs in %.3fs", name, len(fresh), self.build_seconds.get(name, 0.0))

    def drop(self, name: str) -> SearchIndex:
        """Remove the index (the caller deletes the documents for DD)."""
        if name not in self.indexes:
            raise CommandError("Unknown Index name")
        self.journal.append(FtDropIndex(name))
        self.build_seconds.pop(name, None)
        return self.indexes.pop(name)

    def drop_all(self) -> None:
        """FLUSHALL (live or replayed): every index goes, as in RediSearch; not logged
        itself, the FLUSHALL record already says it."""
        self.indexes.clear()
        self.build_seconds.clear()

    def restore_graph(self, name: str, alias: str, docs: list[int], keys: list[bytes], blob: bytes) -> None:
        """Replay of a snapshot's FT.GRAPH: the HNSW graph loads instead of being rebuilt."""
        index = self.indexes.get(name)
        if index is None or len(index):
            return  # dropped, or already filled: the rebuild will do
        started = time.perf_counter()
        index.restore_graph(alias, docs, keys, blob, self.keyspace.get_hash)
        self.build_seconds[name] = time.perf_counter() - started
        self._loaded.add(name)

    def graph_records(self) -> list[tuple[str, str, list[int], list[bytes], bytes]]:
        """(index, field, docs, keys, graph) of every index that snapshots its graph."""
        out = []
        for name, index in list(self.indexes.items()):
            state = index.graph_snapshot()
            if state is not None:
                out.append((name, *state))
        return out

    def restore_create(self, name: str, args: list[bytes]) -> None:
        """Replay of a logged FT.CREATE (a definition that once parsed)."""
        self._loaded.discard(name)
        self.indexes.pop(name, None)
        self.create(name, args)

    def restore_drop(self, name: str) -> None:
        self._loaded.discard(name)
        self.indexes.pop(name, None)
        self.build_seconds.pop(name, None)
