"""The data stores of one worker, built together because they share a memory budget (and
the FT.* indexes watch the keyspace's hashes).

``Stores`` is what the record layer applies to (``store/records.py``), what snapshots
walk (``persist/binding.py``) and what FLUSHALL empties. Built once by
``pion.server.state.build_state``; command families reach it as ``state.stores``.

The keyspace is one ``Keyspace`` per numbered database (``dbs``; ``keyspace`` is database 0,
the one FT.* indexes watch); the V-store, KV.PREFIX, SSM state and semantic caches are global
(SELECT does not change what they hold). One ``--maxmemory`` budget covers all of them: a
keyspace write first evicts keys by ``--maxmemory-policy`` (``evictor``), then V-store sessions;
a V-store write first evicts sessions (whole prefixes, LRU), then state-only SSM namespaces,
then keys by the policy. A write that still does not fit gets -OOM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pion.common.errors import CommandError
from pion.common.ids import Namespace, SessionId, k_session, v_session
from pion.server.store.eviction import DEFAULT_POLICY, DEFAULT_SAMPLES, Evictor
from pion.server.search.store import SearchStore
from pion.server.semantic.cache import SemanticCacheStore
from pion.server.store.attend_slots import AttendSlots
from pion.server.store.keyspace import Keyspace, Value
from pion.server.store.records import KeyCopy, KeyMove, KeysSwapDb
from pion.server.store.ssm import SsmStateStore
from pion.server.store.vstore import VStore


class DatabaseOutOfRange(ValueError):
    """A record names a database this server was not started with (recovery refuses to start)."""

    def __init__(self, db: int, databases: int) -> None:
        super().__init__(f"database {db} is out of range (--databases {databases})")
        self.db = db


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
    dbs: tuple[Keyspace, ...] = ()  # SELECT n; dbs[0] is ``keyspace`` (default: just it)
    evictor: Evictor = field(default_factory=lambda: Evictor(()))

    def __post_init__(self) -> None:
        if not self.dbs:  # built around given stores (tests): database 0 alone, nothing evicts
            object.__setattr__(self, "dbs", (self.keyspace,))
        if not self.evictor.dbs:
            object.__setattr__(self, "evictor", Evictor(self.dbs))

    @classmethod
    def make(cls, max_sessions: int = 256, maxmemory: int = 0, databases: int = 1,
             policy: str = DEFAULT_POLICY, samples: int = DEFAULT_SAMPLES) -> Stores:
        """Empty stores; the V-store's ``maxmemory`` budget counts every database's bytes too."""
        dbs = tuple(Keyspace(db=n) for n in range(max(1, databases)))
        keyspace = dbs[0]
        ssm = SsmStateStore(max_bytes=maxmemory)

        def attend_free_bytes() -> int | None:
            # everything else under --maxmemory: V-store rows plus its external bytes (keyspace,
            # SSM states, and these slots themselves, which are taken back out)
            if vstore.max_bytes <= 0:
                return None
            return max(0, vstore.max_bytes - (vstore.nbytes + vstore.external_bytes() - attend.nbytes))

        attend = AttendSlots(free_bytes=attend_free_bytes)
        vstore = VStore(max_sessions=max_sessions, max_bytes=maxmemory,
                        external_bytes=lambda: sum(ks.used_bytes for ks in dbs) + ssm.nbytes + attend.nbytes)
        join_ssm_to_vstore(ssm, vstore)
        evictor = Evictor(dbs)
        evictor.configure(policy, samples, maxmemory)
        join_keys_to_vstore(evictor, vstore)
        # The SearchStore watches the hashes and drops every index on FLUSHALL (a keyspace
        # flush hook, so FLUSHALL logs nothing for it).
        return cls(vstore, keyspace, SemanticCacheStore(), SearchStore(keyspace), ssm, attend, dbs,
                   evictor)

    # ---- the shared budget ------------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        """What counts toward ``--maxmemory``: V-store rows, every database, SSM state, slots."""
        return self.vstore.nbytes + self.vstore.external_bytes()

    def set_budget(self, maxmemory: int, policy: str, samples: int) -> None:
        """CONFIG SET maxmemory / maxmemory-policy / maxmemory-samples at run time; a lower
        budget is enforced now (keys by the policy, then sessions) as far as eviction can."""
        self.vstore.max_bytes = maxmemory
        self.ssm.max_bytes = maxmemory
        self.evictor.configure(policy, samples, maxmemory)
        if maxmemory > 0 and self.used_bytes > maxmemory:
            self.evictor.evict(self.used_bytes - maxmemory)
            if self.used_bytes > maxmemory:
                try:
                    self.vstore.make_room(0)  # sessions, least recently used first
                except CommandError:
                    pass  # what cannot be evicted stays; writes get -OOM until it fits

    def make_room(self, extra_bytes: int) -> None:
        """Before the keyspace grows by ``extra_bytes``: evict keys by the policy, then least
        recently used V-store sessions, so it fits the shared ``--maxmemory`` budget;
        CommandError(OOM) when it cannot."""
        limit = self.vstore.max_bytes
        if limit <= 0 or extra_bytes <= 0:
            return
        if self.evictor.enabled:
            over = self.used_bytes + extra_bytes - limit
            if over <= 0 or self.evictor.evict(over) >= over:
                return  # fits (keyspace writes take no session slot)
        self.vstore.make_room(extra_bytes)

    # ---- numbered databases -----------------------------------------------------------------
    def db(self, n: int) -> Keyspace:
        """Database ``n``; DatabaseOutOfRange (a replayed record beyond ``--databases``)."""
        if not 0 <= n < len(self.dbs):
            raise DatabaseOutOfRange(n, len(self.dbs))
        return self.dbs[n]

    def swap_dbs(self, a: int, b: int) -> None:
        """SWAPDB a b: every key of the two databases changes sides (logged once)."""
        first, second = self.db(a), self.db(b)
        self.keyspace.journal.append(KeysSwapDb(a, b))
        if a != b:
            first.swap_with(second)

    def move_key(self, src_db: int, key: bytes, dst_db: int) -> None:
        """MOVE: a present ``key`` of ``src_db`` goes, value and TTL, to ``dst_db`` (absent there)."""
        src, dst = self.db(src_db), self.db(dst_db)
        self.keyspace.journal.append(KeyMove(src_db, key, dst_db))
        value, deadline = src.take(key)
        dst.put(key, value, deadline)

    def copy_key(self, src_db: int, src: bytes, dst_db: int, dst: bytes) -> None:
        """COPY: ``dst`` of ``dst_db`` becomes a copy of ``src`` (value and TTL), replacing it."""
        source, target = self.db(src_db), self.db(dst_db)
        self.keyspace.journal.append(KeyCopy(src_db, src, dst_db, dst))
        value = source.peek(src)
        if value is None:
            return
        deadline = source.expire_at_ms(src)
        copied: Value = dict(value) if type(value) is dict else value
        if target.peek(dst) is not None:
            target.take(dst)
        target.put(dst, copied, deadline)

    def flush_all(self) -> None:
        """FLUSHALL: every store empties itself (keyspace with its FT indexes, V-store, semantic
        cache, SSM state: the order of their records in the WAL; then the ATTEND slots)."""
        self.keyspace.flush()
        for ks in self.dbs[1:]:
            if len(ks):
                ks.flush()
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


def join_keys_to_vstore(evictor: Evictor, vstore: VStore) -> None:
    """A V-store write that its sessions and the state-only SSM namespaces cannot make room for
    evicts keyspace keys by ``--maxmemory-policy`` (planned as "up to every evictable key")."""
    before = vstore.plan_extra_room

    def plan(need: int, protect: tuple[SessionId, ...]) -> tuple[int, Callable[[], None]]:
        freed, evict_before = before(need, protect) if before is not None else (0, _nothing)
        if freed >= need or not evictor.enabled:
            return freed, evict_before
        rest = need - freed

        def evict_both() -> None:
            evict_before()
            evictor.evict(rest)
        return freed + min(rest, evictor.evictable_bytes()), evict_both

    vstore.plan_extra_room = plan


def _nothing() -> None:
    return None
