"""The data stores of one worker, built together because they share a memory budget (and
the FT.* indexes watch the keyspace's hashes).

``Stores`` is what the record layer applies to (``store/records.py``), what snapshots
walk (``persist/binding.py``) and what FLUSHALL empties. Built once by
``pion.server.state.build_state``; command families reach it as ``state.stores``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.server.search.store import SearchStore
from pion.server.semantic.cache import SemanticCacheStore
from pion.server.store.keyspace import Keyspace
from pion.server.store.vstore import VStore


@dataclass(frozen=True, slots=True)
class Stores:
    """The V-store (V.*, KV.PREFIX.*), the keyspace (SET/GET/HSET...), the semantic cache and
    the FT.* indexes over the keyspace's hashes."""

    vstore: VStore
    keyspace: Keyspace
    semantic: SemanticCacheStore
    search: SearchStore

    @classmethod
    def make(cls, max_sessions: int = 256, maxmemory: int = 0) -> Stores:
        """Empty stores; the V-store's ``maxmemory`` budget counts the keyspace's bytes too."""
        keyspace = Keyspace()
        vstore = VStore(max_sessions=max_sessions, max_bytes=maxmemory,
                        external_bytes=lambda: keyspace.used_bytes)
        # The SearchStore watches the hashes and drops every index on FLUSHALL (a keyspace
        # flush hook, so FLUSHALL logs nothing for it).
        return cls(vstore, keyspace, SemanticCacheStore(), SearchStore(keyspace))

    def make_room(self, extra_bytes: int) -> None:
        """Before the keyspace grows by ``extra_bytes``: evict least recently used V-store
        sessions so it fits the shared ``--maxmemory`` budget; CommandError(OOM), with
        nothing evicted, when it cannot."""
        self.vstore.make_room(extra_bytes)

    def flush_all(self) -> None:
        """FLUSHALL: every store empties itself (keyspace with its FT indexes, V-store, semantic
        cache: the order of their records in the WAL)."""
        self.keyspace.flush()
        self.vstore.flush()
        self.semantic.flush_all()
