"""Every FT index of a worker, kept current by watching the keyspace's hashes.

``SearchStore.watch(key, fields)`` is a ``Keyspace.watchers`` callback: each HSET,
HDEL, DEL, expiry, SET over a hash and FLUSHALL reaches the indexes whose prefixes
cover the key before the command replies, so a search sees every acknowledged write.

Persistence: ``on_mutation(kind, fields)`` is called before an index is created
(``create``: index, args) or dropped (``drop``: index). The indexes themselves are
never written: replaying FT.CREATE after the hashes scans them again (the rebuild,
timed in ``last_build_s``; FT.INFO shows it as ``total_indexing_time`` in ms).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from pion.common.errors import CommandError
from pion.server.search.index import SearchIndex
from pion.server.search.schema import parse_create
from pion.server.store.keyspace import Hash, Keyspace

log = logging.getLogger("pion.search")
Mutation = Callable[[str, Mapping[str, object]], None]


def _no_log(kind: str, fields: Mapping[str, object]) -> None:
    return None


class SearchStore:
    """Index name -> SearchIndex, fed by the keyspace."""

    def __init__(self, keyspace: Keyspace) -> None:
        self.keyspace = keyspace
        self.indexes: dict[str, SearchIndex] = {}
        self.on_mutation: Mutation = _no_log
        self.build_seconds: dict[str, float] = {}
        keyspace.watchers.append(self.watch)

    def watch(self, key: bytes, fields: Hash | None) -> None:
        for index in self.indexes.values():
            if index.covers(key):
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
        self.on_mutation("create", {"index": name, "args": list(args)})
        index = SearchIndex(definition)
        started = time.perf_counter()
        if not definition.skip_initial_scan:
            for key, value, _ in list(self.keyspace.items()):
                if type(value) is dict and index.covers(key):
                    index.update(key, value)
        self.build_seconds[name] = time.perf_counter() - started
        self.indexes[name] = index
        return index

    def drop(self, name: str) -> SearchIndex:
        """Remove the index (the caller deletes the documents for DD)."""
        if name not in self.indexes:
            raise CommandError("Unknown Index name")
        self.on_mutation("drop", {"index": name})
        self.build_seconds.pop(name, None)
        return self.indexes.pop(name)

    def restore_create(self, name: str, args: list[bytes]) -> None:
        """Replay of a logged FT.CREATE (a definition that once parsed)."""
        self.indexes.pop(name, None)
        index = self.create(name, args)
        log.info("FT index %s rebuilt: %d docs in %.3fs", name, len(index), self.build_seconds[name])

    def restore_drop(self, name: str) -> None:
        self.indexes.pop(name, None)
        self.build_seconds.pop(name, None)
