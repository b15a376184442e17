"""The data stores of one worker, built together because they share a memory budget (and
the FT.* indexes watch the keyspace's hashes).

``Stores`` is what the record layer applies to (``store/records.py``), what snapshots
walk (``persist/binding.py``) and what FLUSHALL empties. Built once by
``pion.server.state.build_state``; command families reach it as ``state.stores``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.common.ids import Namespace, k_session, v_session
from pion.server.search.store import SearchStore
from pion.server.semantic.cache import SemanticCacheStore
from pion.server.store.attend_slots import AttendSlots
from pion.server.store.keyspace import Keyspace
from pion.server.store.ssm import SsmStateStore
from pion.server.store.vstore import VStore


@dataclass(frozen=True, slots=True)
class Stores:
    """The V-store (V.*, KV.PREFIX.*), the keyspace (SET/GET/HSET...), the semantic cache and
    the FT.* indexes over the keyspace's hashes, the SSM.PREFIX.* recurrent state and the
    ATTEND.PREFIX.* slot table (derived data: never logged, emptied by FLUSHALL)."""

    vstore: VStore
    keyspace: Keyspace
    semantic: SemanticCacheStore
    search: SearchStore
    ssm: SsmStateStore
    attend: AttendSlots

    @classmethod
    def make(cls, max_sessions: int = 256, maxmemory: int = 0) -> Stores:
        """Empty stores; the V-store's ``maxmemory`` budget counts the keyspace's bytes too."""
        keyspace = Keyspace()
        ssm = SsmStateStore(max_bytes=maxmemory)

        def attend_free_bytes() -> int | None:
            # everything else under --maxmemory: V-store rows plus its external bytes (keyspace,
            # SSM states, and these slots themselves, which are taken back out)
            if maxmemory <= 0:
                return None
            return max(0, maxmemory - (vstore.nbytes + vstore.external_bytes() - attend.nbytes))

        attend = AttendSlots(free_bytes=attend_free_bytes)
        vstore = VStore(max_sessions=max_sessions, max_bytes=maxmemory,
                        external_bytes=lambda: keyspace.used_bytes + ssm.nbytes + attend.nbytes)
        join_ssm_to_vstore(ssm, vstore)
        # The SearchStore watches the hashes and drops every index on FLUSHALL (a keyspace
        # flush hook, so FLUSHALL logs nothing for it).
        return cls(vstore, keyspace, SemanticCacheStore(), SearchStore(keyspace), ssm, attend)

    def make_room(self, extra_bytes: int) -> None:
        """Before the keyspace grows by ``extra_bytes``: evict least recently used V-store
        sessions so it fits the shared ``--maxmemory`` budget; CommandError(OOM), with
        nothing evicted, when it cannot."""
        self.vstore.make_room(extra_bytes)

    def flush_all(self) -> None:
        """FLUSHALL: every store empties itself (keyspace with its FT indexes, V-store, semantic
        cache, SSM state: the order of their records in the WAL; then the ATTEND slots)."""
        self.keyspace.flush()
        self.vstore.flush()
        self.semantic.flush_all()
        self.ssm.flush()
        self.attend.flush()


def join_ssm_to_vstore(ssm: SsmStateStore, vstore: VStore) -> None:
    """A hybrid prefix's two halves live and die together (``store/ssm.py``): the state's
    bytes count toward the shared budget, leave with the K/V group the V-store evicts, go
    when a K/V side is dropped, and state-only namespaces are evicted for the V-store's room."""
    ssm.used_bytes = lambda: vstore.nbytes + vstore.external_bytes()
    vstore.on_prefix_removed.append(ssm.remove_with_prefix)
    vstore.group_extra_bytes = ssm.group_bytes
    vstore.plan_extra_room = ssm.plan_room

    def make_kv_room(extra: int, ns: Namespace) -> None:
        vstore.make_room(extra, (k_session(ns), v_session(ns)))

    def has_kv(ns: Namespace) -> bool:
        return vstore.get(k_session(ns)) is not None or vstore.get(v_session(ns)) is not None

    ssm.make_kv_room = make_kv_room
    ssm.has_kv = has_kv
