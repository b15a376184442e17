"""Where the stores meet persistence: their journal, the recovery sink, the snapshot walk.

* ``WalJournal`` — the journal every store gets once recovery is done: each record
  (``store/records.py``) becomes one WAL append before the mutation is applied (raising
  ``CommandError(MISCONF)`` aborts the mutation).
* ``make_sink`` — recovery's sink: decodes a record into its class and applies it to the
  stores through their ordinary methods (journals still detached).
* ``snapshot_records`` — walks the stores and yields the records that rebuild them
  (SAVE, BGSAVE).
* ``attach`` — the three above, wired for one worker (the journal only with ``--appendonly yes``).
* ``ReplyHooks`` — the network layer's per-batch WAL hooks (group commit).

The record schema is documented once, in ``store/records.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from pion.codecs.base import token_group
from pion.common.ids import K_SUFFIX, V_SUFFIX
from pion.server.persist.records import RecordType, set_payload
from pion.server.persist.recovery import RecoveryError
from pion.server.store.stores import DatabaseOutOfRange
from pion.server.store.records import (
    FtCreate, FtGraph, KeyExpire, KeyHSet, KeySet, PrefixRegister, Record, SemanticSet, SsmStore,
    VCreate, VStoreBatch, decode_record,
)

if TYPE_CHECKING:
    from pion.server.persist.manager import Persistence
    from pion.server.store.stores import Stores

_SET: Final = RecordType.SET  # a static in compiled code (an enum member lookup otherwise)
SNAPSHOT_CHUNK_BYTES = 64 * 1024**2  # a layer up to this size reloads into an exact-fit buffer


class WalJournal:
    """A store's journal under persistence: every record is appended to the WAL first."""

    durable = True

    def __init__(self, persist: Persistence) -> None:
        self._persist = persist
        self._append = persist.append
        self._wal_max_bytes = persist.options.wal_max_bytes  # (options never change)

    def append(self, record: Record) -> None:
        payload = record.small_payload()  # a pre-encoded payload on the hot path (SET), else None
        self._append(record.TYPE, record.fields() if payload is None else payload)

    def log_set(self, key: bytes, value: bytes, expire_at_ms: int | None) -> None:
        """``append(KeySet(key, value, expire_at_ms))`` without the record object: the same
        type and payload bytes (``set_payload``, else the same field map), one call less and
        no allocation per plain SET (``store/journal.py``, ``SetLogger``)."""
        payload = set_payload(key, value, expire_at_ms)
        fields: Mapping[str, Any] | bytes = payload if payload is not None else {
            "key": key, "value": value, "expire_at_ms": expire_at_ms}
        wal = self._persist.wal
        if wal is None:
            self._append(_SET, fields)  # not recovered yet: Persistence.append raises
            return
        # What Persistence.append does, with the WAL writer called directly (a native call
        # when compiled, instead of a Python-level method in between, once per SET).
        wal.append(_SET, fields)
        if wal.wal_bytes > self._wal_max_bytes:
            self._persist.wal_grew()


class ReplyHooks:
    """The WAL's two hooks on the network layer (``net.PionServer.before_reply`` and
    ``reply_pending``): what ``Persistence.flush_batch``/``batch_pending`` do, here in a
    compiled module so that the per-batch calls run no Python bytecode (``batch_pending``
    runs once per reply batch: as two Python frames, 1.4% of a non-pipelined GET's CPU;
    issue 13). The WAL is read from ``persist`` at each call: it is None before recovery
    and after shutdown closed it."""

    def __init__(self, persist: Persistence) -> None:
        self._persist = persist

    def flush_batch(self) -> None:
        """Write the buffered records (and fsync under always); CommandError(MISCONF)."""
        wal = self._persist.wal
        if wal is not None:
            wal.flush_batch()

    def batch_pending(self) -> bool:
        """True when ``flush_batch`` has work to do before replies may go out."""
        wal = self._persist.wal
        return wal is not None and wal.batch_pending


def make_sink(stores: Stores) -> Callable[[int, dict[str, Any]], None]:
    """The recovery sink: one decoded record -> the store method that made it."""

    def sink(rtype: int, fields: dict[str, Any]) -> None:
        try:
            decode_record(rtype, fields).apply(stores)
        except DatabaseOutOfRange as exc:  # loading it would drop a database's keys: refuse
            raise RecoveryError(f"{exc}: start with --databases {exc.db + 1} or more") from None
    return sink


def attach(stores: Stores, persist: Persistence) -> None:
    """Log every mutation from now on, and let SAVE/BGSAVE walk the stores. Under
    ``--appendonly no`` the stores keep their null journals: nothing is logged."""
    persist.set_snapshot_source(lambda: snapshot_fields(stores))
    if not persist.appendonly:
        return
    journal = WalJournal(persist)
    stores.vstore.journal = journal
    for keyspace in stores.dbs:
        keyspace.journal = journal
    stores.semantic.journal = journal
    stores.search.journal = journal
    stores.ssm.journal = journal


def snapshot_fields(stores: Stores) -> Iterator[tuple[RecordType, Mapping[str, Any]]]:
    """``snapshot_records`` as the (type, fields) pairs ``Persistence`` frames."""
    for record in snapshot_records(stores):
        yield record.TYPE, record.fields()


def _namespace_of(sid: str) -> str | None:
    for suffix in (K_SUFFIX, V_SUFFIX):
        if sid.endswith(suffix):
            return sid[: -len(suffix)]
    return None


def snapshot_records(stores: Stores) -> Iterator[Record]:
    """Records that rebuild the stores, read lazily so a BGSAVE sees a live store.

    Sessions come least recently used first (so LRU order survives a reload); a
    prefix's registration follows its first session; rows go in chunks of at most
    64 MiB (one record per layer in practice), straight from the layer buffers (no copy here).
    Then one SSM.PREFIX.STORE per held state layer (least recently used namespace first),
    then every key (a hash as HSET, plus EXPIRE with a TTL), then one FT.CREATE per index and
    the FT.GRAPH records, then one SEMANTIC.SET per live semantic-cache entry (with its
    cache's ``next_id``, so ids are not reused after a reload).
    """
    vstore, semantic = stores.vstore, stores.semantic
    registered: set[str] = set()
    # Names first, each session looked up when its turn comes: a list of the sessions (or of the
    # keys' values below) would keep everything evicted during a BGSAVE alive until the walk
    # ends — up to a second copy of the store in RSS under --maxmemory churn.
    for sid in [session.sid for session in vstore.iter_sessions()]:
        session = vstore.get(sid)
        if session is None:
            continue  # dropped while a background snapshot was walking the store
        yield VCreate(session.sid, session.kv_dim, session.formats, session.uniform)
        ns = _namespace_of(session.sid)
        entry = vstore.prefix(ns) if ns is not None else None
        if entry is not None and ns not in registered:
            registered.add(entry.ns)
            blocks = entry.blocks
            yield PrefixRegister(entry.ns, entry.kv_dim, entry.k_formats, entry.v_formats, entry.uniform,
                                 None if blocks is None else blocks.block_size,
                                 None if blocks is None else blocks.blob(), entry.layers)
        for layer, buf in sorted(session.layers.items()):
            n_rows = buf.n_rows
            group = token_group(buf.codec)  # chunks of whole token groups (kivi formats), so replay accepts them
            step = max(group, SNAPSHOT_CHUNK_BYTES // buf.row_bytes // group * group)
            for start in range(0, n_rows, step):
                end = min(n_rows, start + step, buf.n_rows)
                if end <= start:
                    break
                yield VStoreBatch(session.sid, layer, start, end - start, buf.raw(start, end))
    # After every V-store record: a K/V session's replay would remove its prefix's state.
    for ssm_entry in stores.ssm.iter_entries():  # least recently used first
        for layer, blob in sorted(ssm_entry.layers.items()):
            yield SsmStore(ssm_entry.ns, layer, blob)
    for keyspace in stores.dbs:  # database n > 0 as the records' *Db twins
        db = keyspace.db
        for key in keyspace.key_names():
            live = keyspace.snapshot_entry(key)
            if live is None:
                continue  # deleted, evicted or expired since the walk began
            value, deadline = live
            if isinstance(value, bytes):
                record: Record = KeySet(key, value, deadline)
                yield record.in_db(db) if db else record
                continue
            record = KeyHSet(key, [x for item in dict(value).items() for x in item])
            yield record.in_db(db) if db else record
            if deadline is not None:
                record = KeyExpire(key, deadline)
                yield record.in_db(db) if db else record
    # After the hashes: replaying FT.CREATE indexes what exists (the rebuild). Every graph at
    # one instant, after all hashes: a hash written since the snapshot began is in the WAL
    # too, and its replay re-indexes it over the loaded graph.
    for name, index in list(stores.search.indexes.items()):
        yield FtCreate(name, list(index.definition.args))
    for name, field, docs, keys, graph in stores.search.graph_records():
        yield FtGraph(name, field, docs, keys, graph)
    for cache, next_id, item, vec in semantic.iter_entries():
        yield SemanticSet(
            cache, item.scope, item.text, item.response, vec.astype("<f4").tobytes(),
            int(round(item.expires_at * 1000)) if item.expires_at is not None else 0,
            int(item.created_at * 1000), item.meta, item.entry_id, next_id)
