"""How the V-store and the keyspace are logged, replayed and snapshotted.

Three adapters between the stores' own vocabulary and records (the V-store, the
keyspace and the semantic cache of AI.SEMANTIC_CACHE):

* ``StoreJournal`` — the ``journal`` object a store calls as
  ``record(kind, fields)`` before each mutation; it appends one record to the
  WAL (raising CommandError(MISCONF) aborts the mutation). The semantic cache calls
  its ``on_mutation(kind, fields)`` hook the same way (``semantic_journal``).
* ``make_sink`` — the recovery sink: applies a record to the stores through
  their ordinary methods while their journals are detached.
* ``snapshot_records`` — walks both stores and yields the records that rebuild
  them (used by SAVE and BGSAVE).

Hashes are logged as HSET/HDEL records (and snapshotted as one HSET per hash); FT.*
index definitions as FT.CREATE/FT.DROPINDEX (``search_binding``): indexes are not
stored, they are rebuilt from the hashes when the definition is replayed.

PREFILL_MS is deliberately not persisted (spec): a restarted server credits
hits on such a prefix with the per-token estimate. Expiry deletions of keys are
not logged either: SET/EXPIRE carry absolute deadlines, so a replayed key whose
deadline has passed expires on its own (and a GET of an expired key keeps
working while the WAL is in MISCONF). The same holds for semantic-cache entries
(their TTL purge, kind ``expire``, is not logged).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pion.common.errors import CommandError
from pion.common.ids import K_SUFFIX, V_SUFFIX
from pion.server.persist.records import RecordType
from pion.server.persist.search_binding import SEARCH_TYPES, apply_search_record, search_snapshot_records
from pion.server.persist.ssm_binding import SSM_TYPES, apply_ssm, ssm_snapshot_records

if TYPE_CHECKING:
    from pion.server.persist.manager import Persistence
    from pion.server.search.store import SearchStore
    from pion.server.semantic.cache import SemanticCacheStore
    from pion.server.store.keyspace import Keyspace
    from pion.server.store.ssm import SsmStateStore
    from pion.server.store.vstore import VStore

VSTORE_KINDS: dict[str, RecordType] = {
    "create": RecordType.V_CREATE,
    "store": RecordType.V_STOREBATCH,
    "drop": RecordType.V_DROP,
    "register": RecordType.KV_PREFIX_REGISTER,
    "prefix_drop": RecordType.KV_PREFIX_DROP,
    "evict": RecordType.EVICT,
    "flush": RecordType.V_FLUSH,
}
KEYSPACE_KINDS: dict[str, RecordType] = {
    "set": RecordType.SET,
    "del": RecordType.DEL,
    "expire": RecordType.EXPIRE,
    "flush": RecordType.FLUSHALL,
    "hset": RecordType.HSET,
    "hdel": RecordType.HDEL,
}
SEMANTIC_KINDS: dict[str, RecordType] = {
    "put": RecordType.SEMANTIC_SET,
    "delete": RecordType.SEMANTIC_DEL,
    "flush": RecordType.SEMANTIC_FLUSH,
    "flush_all": RecordType.SEMANTIC_FLUSHALL,
}
SEMANTIC_NOT_LOGGED = frozenset({"expire"})  # absolute deadlines: replay expires them itself
NOT_PERSISTED = frozenset({"prefill_ms"})  # StoreJournal.record tests "prefill_ms" first (hot path)
SNAPSHOT_CHUNK_BYTES = 64 * 1024**2  # a layer up to this size reloads into an exact-fit buffer


class StoreJournal:
    """A store's journal: every mutation becomes one WAL record before it is applied."""

    def __init__(self, persist: Persistence, kinds: Mapping[str, RecordType], store_name: str,
                 skip: Callable[[str, Mapping[str, Any]], bool] | None = None,
                 skip_kinds: frozenset[str] | None = None) -> None:
        """``skip`` may drop a record instead of logging it; with ``skip_kinds`` it is
        asked only about those kinds (one call less per SET on the hot path)."""
        self._append = persist.append
        self._kinds = kinds
        self._store_name = store_name
        self._skip = skip
        self._skip_kinds = skip_kinds

    def record(self, kind: str, fields: Mapping[str, Any]) -> None:
        rtype = self._kinds.get(kind)
        if rtype is None:  # a mutation we cannot log must not happen silently
            raise CommandError(f"the {self._store_name} mutation '{kind}' cannot be written to the WAL "
                               "by this build; refused so nothing unlogged is acknowledged")
        skip = self._skip
        if (skip is not None and (self._skip_kinds is None or kind in self._skip_kinds)
                and skip(kind, fields)):
            return
        if "prefill_ms" in fields and NOT_PERSISTED.intersection(fields):
            fields = {k: v for k, v in fields.items() if k not in NOT_PERSISTED}
        self._append(rtype, fields)


EXPIRED_KEY_DELETE_KINDS = frozenset({"del"})  # the only kind expired_key_delete can skip


def expired_key_delete(keyspace: Keyspace) -> Callable[[str, Mapping[str, Any]], bool]:
    """True for the keyspace's 'del' of keys whose absolute deadline has passed."""
    from pion.server.store.keyspace import now_ms

    def skip(kind: str, fields: Mapping[str, Any]) -> bool:
        if kind != "del":
            return False
        now = now_ms()
        for key in fields["keys"]:
            deadline = keyspace.expire_at_ms(key)
            if deadline is None or deadline > now:
                return False
        return True
    return skip


def semantic_journal(persist: Persistence) -> Callable[[str, Mapping[str, Any]], None]:
    """The semantic cache's ``on_mutation`` hook: one WAL record per logged mutation."""
    append = persist.append

    def record(kind: str, fields: Mapping[str, Any]) -> None:
        if kind in SEMANTIC_NOT_LOGGED:
            return
        rtype = SEMANTIC_KINDS.get(kind)
        if rtype is None:  # a mutation we cannot log must not happen silently
            raise CommandError(f"the semantic cache mutation '{kind}' cannot be written to the WAL "
                               "by this build; refused so nothing unlogged is acknowledged")
        append(rtype, fields)
    return record


def _apply_semantic(semantic: SemanticCacheStore, rtype: int, f: dict[str, Any]) -> None:
    import numpy as np

    if rtype == RecordType.SEMANTIC_SET:
        vec = np.frombuffer(_b(f["vector"]), dtype="<f4").astype(np.float32)
        meta = f.get("meta")
        semantic.restore(f["cache"], f["scope"], f["text"], _b(f["response"]), vec, f["id"],
                         f["expire_at_ms"], f.get("created_ms", 0), None if meta is None else _b(meta),
                         next_id=f.get("next_id"))
    elif rtype == RecordType.SEMANTIC_DEL:
        semantic.delete(f["cache"], list(f["ids"]))
    elif rtype == RecordType.SEMANTIC_FLUSH:
        semantic.flush(f["cache"])
    else:
        semantic.flush_all()


_SEMANTIC_TYPES = frozenset({RecordType.SEMANTIC_SET, RecordType.SEMANTIC_DEL, RecordType.SEMANTIC_FLUSH,
                             RecordType.SEMANTIC_FLUSHALL})


def _b(value: Any) -> bytes:
    return bytes(value) if isinstance(value, memoryview) else value


def make_sink(vstore: VStore | None, keyspace: Keyspace | None,
              semantic: SemanticCacheStore | None = None,
              search: SearchStore | None = None,
              ssm: SsmStateStore | None = None) -> Callable[[int, dict[str, Any]], None]:
    """The recovery sink: one record -> the store method that made it (journals detached)."""

    def sink(rtype: int, f: dict[str, Any]) -> None:
        if rtype == RecordType.V_STOREBATCH and vstore is not None:
            vstore.store_rows(f["sid"], f["layer"], f["start_id"], f["rows"], dtype="raw")
        elif rtype == RecordType.SET and keyspace is not None:
            keyspace.set(_b(f["key"]), _b(f["value"]), f["expire_at_ms"])
        elif rtype == RecordType.V_CREATE and vstore is not None:
            vstore.create_session(f["sid"], f["kv_dim"], tuple(f["formats"]), bool(f["uniform"]))
        elif rtype == RecordType.V_DROP and vstore is not None:
            vstore.drop([f["sid"]])
        elif rtype == RecordType.KV_PREFIX_REGISTER and vstore is not None:
            hashes = f.get("hashes")
            vstore.register_prefix(f["ns"], f["kv_dim"], tuple(f["k_formats"]), tuple(f["v_formats"]),
                                   bool(f["uniform"]), block_size=f.get("block_size"),
                                   hashes=None if hashes is None else bytes(hashes), layers=f.get("layers"))
        elif rtype == RecordType.KV_PREFIX_DROP and vstore is not None:
            vstore.drop_prefixes([f["ns"]])
        elif rtype == RecordType.EVICT and vstore is not None:
            vstore.evict_sessions(list(f["sids"]))
        elif rtype == RecordType.V_FLUSH and vstore is not None:
            vstore.flush()
        elif rtype == RecordType.DEL and keyspace is not None:
            keyspace.delete([_b(k) for k in f["keys"]])
        elif rtype == RecordType.EXPIRE and keyspace is not None:
            keyspace.expire(_b(f["key"]), f["expire_at_ms"])
        elif rtype == RecordType.FLUSHALL and keyspace is not None:
            keyspace.flush()
        elif rtype in _SEMANTIC_TYPES and semantic is not None:
            _apply_semantic(semantic, rtype, f)
        elif rtype == RecordType.HSET and keyspace is not None:
            keyspace.hset(_b(f["key"]), [_b(x) for x in f["pairs"]])
        elif rtype == RecordType.HDEL and keyspace is not None:
            keyspace.hdel(_b(f["key"]), [_b(x) for x in f["fields"]])
        elif rtype in SEARCH_TYPES and search is not None:
            apply_search_record(search, rtype, f)
        elif rtype in SSM_TYPES and ssm is not None:
            apply_ssm(ssm, rtype, f)
        else:
            raise ValueError(f"no store takes records of type {rtype}")
    return sink


def _namespace_of(sid: str) -> str | None:
    for suffix in (K_SUFFIX, V_SUFFIX):
        if sid.endswith(suffix):
            return sid[: -len(suffix)]
    return None


def snapshot_records(vstore: VStore | None, keyspace: Keyspace | None,
                     semantic: SemanticCacheStore | None = None,
                     search: SearchStore | None = None,
                     ssm: SsmStateStore | None = None,
                     ) -> Iterator[tuple[RecordType, dict[str, Any]]]:
    """Records that rebuild the stores, read lazily so a BGSAVE sees a live store.

    Sessions come least recently used first (so LRU order survives a reload); a
    prefix's registration follows its first session; rows go in chunks of at most
    64 MiB (one record per layer in practice), straight from the layer buffers (no copy here).
    Then every key, then one SEMANTIC.SET per live semantic-cache entry (with its cache's
    ``next_id``, so ids are not reused after a reload).
    """
    if vstore is not None:
        registered: set[str] = set()
        for session in vstore.iter_sessions():
            if vstore.get(session.sid) is not session:
                continue  # dropped while a background snapshot was walking the store
            yield RecordType.V_CREATE, {"sid": session.sid, "kv_dim": session.kv_dim,
                                        "formats": session.formats, "uniform": session.uniform}
            ns = _namespace_of(session.sid)
            entry = vstore.prefix(ns) if ns is not None else None
            if entry is not None and ns not in registered:
                registered.add(entry.ns)
                blocks = entry.blocks
                yield RecordType.KV_PREFIX_REGISTER, {
                    "ns": entry.ns, "kv_dim": entry.kv_dim, "k_formats": entry.k_formats,
                    "v_formats": entry.v_formats, "uniform": entry.uniform,
                    "block_size": None if blocks is None else blocks.block_size,
                    "hashes": None if blocks is None else blocks.blob, "layers": entry.layers}
            for layer, buf in sorted(session.layers.items()):
                n_rows = buf.n_rows
                step = max(1, SNAPSHOT_CHUNK_BYTES // buf.row_bytes)
                for start in range(0, n_rows, step):
                    end = min(n_rows, start + step, buf.n_rows)
                    if end <= start:
                        break
                    yield RecordType.V_STOREBATCH, {"sid": session.sid, "layer": layer, "start_id": start,
                                                    "n_rows": end - start, "rows": buf.raw(start, end)}
    if ssm is not None:  # after the K/V sessions, whose replay would not remove it
        yield from ssm_snapshot_records(ssm)
    if keyspace is not None:
        for key, value, deadline in list(keyspace.items()):
            if isinstance(value, bytes):
                yield RecordType.SET, {"key": key, "value": value, "expire_at_ms": deadline}
                continue
            pairs = [x for item in dict(value).items() for x in item]
            yield RecordType.HSET, {"key": key, "pairs": pairs}
            if deadline is not None:
                yield RecordType.EXPIRE, {"key": key, "expire_at_ms": deadline}
    if search is not None:  # after the hashes: FT.CREATE indexes what exists (the rebuild)
        yield from search_snapshot_records(search)
    if semantic is not None:
        for cache, next_id, item, vec in semantic.iter_entries():
            yield RecordType.SEMANTIC_SET, {
                "cache": cache, "scope": item.scope, "text": item.text, "response": item.response,
                "vector": vec.astype("<f4").tobytes(),
                "expire_at_ms": int(round(item.expires_at * 1000)) if item.expires_at is not None else 0,
                "created_ms": int(item.created_at * 1000), "meta": item.meta, "id": item.entry_id,
                "next_id": next_id}
