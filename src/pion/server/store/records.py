"""Logged mutations: one class per WAL/snapshot record — the schema of every record lives here.

A store builds one of these *after* validating a request and *before* changing anything,
hands it to its ``Journal`` (``store/journal.py``), then applies the change; recovery
decodes each record back into its class and calls ``apply(stores)``, which runs the same
store method with the journal detached. A record knows three things:

* its **fields** — the dataclass attributes, in declaration order, are the field names
  and their order on disk (``fields()``; ``OMIT_NONE`` names are left out when None);
* its **type byte** — ``TYPE``, a ``RecordType`` (the frame header, ``persist/records.py``);
* how to **apply** itself — ``apply(stores)``.

Adding a record type: one class here (``@register``), one ``RecordType`` number in
``persist/records.py``, one round-trip test. A misspelt record is a misspelt class name:
mypy and the import fail, not a run-time ``-ERR``.

The frame and the tagged field encoding (``i`` i64, ``f`` f64, ``t`` bool, ``s`` utf-8,
``b`` bytes, ``n`` None, ``l`` list) are in ``persist/records.py``; files in
``persist/files.py`` and ``persist/snapshot.py``. Decoders ignore fields they do not know,
so a newer writer may add some. Schema (type byte, class, fields)::

    1  V.CREATE            VCreate           sid s, kv_dim i, formats l[s], uniform t
    2  V.STOREBATCH        VStoreBatch       sid s, layer i, start_id i, n_rows i,
                                             rows b (the stored encoding)
    3  V.DROP              VDrop             sid s
    4  KV.PREFIX.REGISTER  PrefixRegister    ns s, kv_dim i, k_formats l[s], v_formats l[s],
                                             uniform t, block_size i|n, hashes b|n (u64 LE),
                                             layers i|n (PREFILL_MS is deliberately not persisted)
    5  KV.PREFIX.DROP      PrefixDrop        ns s (both sessions and the registration)
    6  SET                 KeySet            key b, value b, expire_at_ms i|n (absolute unix ms)
    7  DEL                 KeysDel           keys l[b]
    8  EXPIRE              KeyExpire         key b, expire_at_ms i|n (absolute unix ms; n = persist)
    9  FLUSHALL            KeysFlush         (no fields: the keyspace's part of FLUSHALL)
    10 EVICT               Evict             sids l[s] (LRU / maxmemory eviction; a K/V pair together)
    11 V.FLUSH             VFlush            (no fields: every V-store session and registration)
    12 SEMANTIC.SET        SemanticSet       cache s, scope s, text s, response b, vector b
                                             (unit-norm fp32 LE: replay needs no embedding model),
                                             expire_at_ms i (absolute unix ms; 0 = no TTL),
                                             created_ms i, meta b|n, id i; in snapshots also
                                             next_id i (the cache's next entry id)
    13 SEMANTIC.DEL        SemanticDel       cache s, ids l[i] (only ids that were present)
    14 SEMANTIC.FLUSH      SemanticFlush     cache s (one named semantic cache)
    15 SEMANTIC.FLUSHALL   SemanticFlushAll  (no fields: every semantic cache, from FLUSHALL)
    16 SSM.PREFIX.STORE    SsmStore          ns s, layer i, state b (the opaque recurrent-state blob)
    17 SSM.PREFIX.DROP     SsmDrop           ns s, layer i|n (n = every layer of ns)
    18 SSM.PREFIX.EVICT    SsmEvict          namespaces l[s] (state-only namespaces evicted for room;
                                             state with K/V sessions leaves through their
                                             EVICT/DROP records, whose replay removes it again)
    19 SSM.PREFIX.FLUSH    SsmFlush          (no fields: every namespace's state, from FLUSHALL)
    40 HSET                KeyHSet           key b, pairs l[b] (field, value, field, value, ...)
    41 HDEL                KeyHDel           key b, fields l[b] (only fields that were present;
                                             the attribute is ``hash_fields``)
    42 FT.CREATE           FtCreate          index s, args l[b] (the FT.CREATE words after the
                                             index name)
    43 FT.DROPINDEX        FtDropIndex       index s (the documents, with DD, go as their own DEL)
    44 FT.GRAPH            FtGraph           index s, field s, docs l[i], keys l[b], graph b
                                             (hnswlib's save_index file; snapshots only, after
                                             the index's FT.CREATE)
    60 SET (db n)          KeySetDb          key b, value b, expire_at_ms i|n, db i
    61 DEL (db n)          KeysDelDb         keys l[b], db i
    62 EXPIRE (db n)       KeyExpireDb       key b, expire_at_ms i|n, db i
    63 FLUSHDB (db n)      KeysFlushDb       db i
    64 HSET (db n)         KeyHSetDb         key b, pairs l[b], db i
    65 HDEL (db n)         KeyHDelDb         key b, fields l[b], db i
    66 SWAPDB              KeysSwapDb        a i, b i
    67 RENAME              KeyRename         db i, src b, dst b (dst replaced; TTL travels)
    68 COPY                KeyCopy           src_db i, src b, dst_db i, dst b (dst replaced)
    69 MOVE                KeyMove           src_db i, key b, dst_db i

Database 0's keyspace records are types 6-9, 40-41, byte for byte what the code before
numbered databases wrote (so old files load as database 0, and a database-0-only server
writes what it always wrote). A mutation of database n > 0 is logged as the ``*Db`` twin
(``Record.in_db``), a new type byte, so older code refuses such a file instead of loading
database n's keys into database 0.
    127 SNAPSHOT.END       (snapshot.py)     records i, begin_seq i, end_seq i

A snapshot holds one HSET per hash (plus EXPIRE when it has a TTL), then one FT.CREATE per
index, then the FT.GRAPH records: indexes are rebuilt from the hashes after recovery
(``SearchStore.finish_deferred``) unless a graph was loaded.

Not logged, on purpose: expiry deletions of keys and semantic entries (deadlines are
absolute, so a replayed entry expires on its own) and PREFILL_MS (a restarted server
credits such a prefix with the per-token estimate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pion.common.ids import SessionId
from pion.server.persist.records import RecordType, set_payload

if TYPE_CHECKING:
    from pion.server.store.stores import Stores

Blob = bytes | memoryview


class Record:
    """Base of every logged mutation (see the module docstring)."""

    __slots__ = ()
    TYPE: ClassVar[RecordType]
    NAMES: ClassVar[tuple[str, ...]] = ()  # field names in disk order, set by @register
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()  # fields left out of the payload when None

    def fields(self) -> dict[str, Any]:
        """The field map ``persist/records.py`` encodes, in disk order."""
        omit = self.OMIT_NONE
        out = {}
        for name in self.NAMES:
            value = getattr(self, name)
            if value is None and name in omit:
                continue
            out[name] = value
        return out

    def small_payload(self) -> bytes | None:
        """The encoded payload when this record can build it faster than the generic encoder
        (the same bytes as encoding ``fields()``); None otherwise. Only hot records override it."""
        return None

    @classmethod
    def decode(cls: type[R], fields: Mapping[str, Any]) -> R:
        """The record from a decoded payload; blob fields become ``bytes`` unless the class
        keeps views (``VStoreBatch`` rows are copied by the store). KeyError if one is missing."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in fields:
                values[f.name] = _owned(fields[f.name])
            elif f.default is dataclasses.MISSING:
                raise KeyError(f"{RecordType(cls.TYPE).name} record has no field '{f.name}'")
        return cls(**values)

    def apply(self, stores: Stores) -> None:
        """Make the change on ``stores`` (journals detached during recovery)."""
        raise NotImplementedError

    def in_db(self, db: int) -> Record:
        """This keyspace mutation as logged for database ``db`` > 0 (its ``*Db`` twin); records
        that name their databases themselves are returned as they are."""
        return self


R = TypeVar("R", bound=Record)
RECORD_CLASSES: dict[int, type[Record]] = {}


def register(cls: type[R]) -> type[R]:
    """Add a record class to the registry by its type byte; a type byte taken twice is refused."""
    if cls.TYPE in RECORD_CLASSES:
        raise ValueError(f"record type {cls.TYPE} registered twice "
                         f"({RECORD_CLASSES[cls.TYPE].__name__} and {cls.__name__})")
    cls.NAMES = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    RECORD_CLASSES[cls.TYPE] = cls
    return cls


def decode_record(rtype: int, fields: Mapping[str, Any]) -> Record:
    """The record of type byte ``rtype``; ValueError for a type no class describes."""
    cls = RECORD_CLASSES.get(rtype)
    if cls is None:
        raise ValueError(f"no record class for type {rtype}")
    return cls.decode(fields)


def _owned(value: Any) -> Any:
    """Blobs decoded as views into a reader's buffer, copied so a store may keep them."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, tuple):
        return tuple(_owned(v) for v in value)
    return value


# ---- V-store ---------------------------------------------------------------------------------
@register
@dataclass(slots=True)
class VCreate(Record):
    TYPE: ClassVar[RecordType] = RecordType.V_CREATE
    sid: str
    kv_dim: int
    formats: tuple[str, ...]  # one per layer, or one for a uniform session
    uniform: bool

    def apply(self, stores: Stores) -> None:
        stores.vstore.create_session(self.sid, self.kv_dim, tuple(self.formats), bool(self.uniform))


@register
@dataclass(slots=True)
class VStoreBatch(Record):
    TYPE: ClassVar[RecordType] = RecordType.V_STOREBATCH
    sid: str
    layer: int
    start_id: int
    n_rows: int
    rows: Blob  # encoded rows; when logged, a view valid only during the journal call

    @classmethod
    def decode(cls, fields: Mapping[str, Any]) -> VStoreBatch:
        # The rows stay a view into the reader's buffer: store_rows copies them once.
        return cls(fields["sid"], fields["layer"], fields["start_id"], fields["n_rows"], fields["rows"])

    def apply(self, stores: Stores) -> None:
        stores.vstore.store_rows(self.sid, self.layer, self.start_id, self.rows, dtype="raw")


@register
@dataclass(slots=True)
class VDrop(Record):
    TYPE: ClassVar[RecordType] = RecordType.V_DROP
    sid: str

    def apply(self, stores: Stores) -> None:
        stores.vstore.drop([self.sid])


@register
@dataclass(slots=True)
class PrefixRegister(Record):
    TYPE: ClassVar[RecordType] = RecordType.KV_PREFIX_REGISTER
    ns: str
    kv_dim: int
    k_formats: tuple[str, ...]
    v_formats: tuple[str, ...]
    uniform: bool
    block_size: int | None = None
    hashes: Blob | None = None  # block hashes, u64 little-endian
    layers: int | None = None

    def apply(self, stores: Stores) -> None:
        stores.vstore.register_prefix(
            self.ns, self.kv_dim, tuple(self.k_formats), tuple(self.v_formats), bool(self.uniform),
            block_size=self.block_size, hashes=None if self.hashes is None else bytes(self.hashes),
            layers=self.layers)


@register
@dataclass(slots=True)
class PrefixDrop(Record):
    TYPE: ClassVar[RecordType] = RecordType.KV_PREFIX_DROP
    ns: str

    def apply(self, stores: Stores) -> None:
        stores.vstore.drop_prefixes([self.ns])


@register
@dataclass(slots=True)
class Evict(Record):
    TYPE: ClassVar[RecordType] = RecordType.EVICT
    sids: Sequence[str]

    def apply(self, stores: Stores) -> None:
        stores.vstore.evict_sessions([SessionId(s) for s in self.sids])


@register
@dataclass(slots=True)
class VFlush(Record):
    TYPE: ClassVar[RecordType] = RecordType.V_FLUSH

    def apply(self, stores: Stores) -> None:
        stores.vstore.flush()


# ---- keyspace --------------------------------------------------------------------------------
@register
@dataclass(slots=True)
class KeySet(Record):
    TYPE: ClassVar[RecordType] = RecordType.SET
    key: bytes
    value: bytes
    expire_at_ms: int | None

    def fields(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "expire_at_ms": self.expire_at_ms}

    def small_payload(self) -> bytes | None:  # the hot path of a pipelined SET
        return set_payload(self.key, self.value, self.expire_at_ms)

    @classmethod
    def decode(cls, fields: Mapping[str, Any]) -> KeySet:
        return cls(bytes(fields["key"]), bytes(fields["value"]), fields["expire_at_ms"])

    def in_db(self, db: int) -> Record:
        return KeySetDb(self.key, self.value, self.expire_at_ms, db)

    def apply(self, stores: Stores) -> None:
        stores.keyspace.set(self.key, self.value, self.expire_at_ms)


@register
@dataclass(slots=True)
class KeysDel(Record):
    TYPE: ClassVar[RecordType] = RecordType.DEL
    keys: Sequence[bytes]

    def in_db(self, db: int) -> Record:
        return KeysDelDb(self.keys, db)

    def apply(self, stores: Stores) -> None:
        stores.keyspace.delete(list(self.keys))


@register
@dataclass(slots=True)
class KeyExpire(Record):
    TYPE: ClassVar[RecordType] = RecordType.EXPIRE
    key: bytes
    expire_at_ms: int | None  # None: the TTL is removed (PERSIST)

    def in_db(self, db: int) -> Record:
        return KeyExpireDb(self.key, self.expire_at_ms, db)

    def apply(self, stores: Stores) -> None:
        stores.keyspace.expire(self.key, self.expire_at_ms)


@register
@dataclass(slots=True)
class KeysFlush(Record):
    TYPE: ClassVar[RecordType] = RecordType.FLUSHALL

    def in_db(self, db: int) -> Record:
        return KeysFlushDb(db)

    def apply(self, stores: Stores) -> None:
        stores.keyspace.flush()


@register
@dataclass(slots=True)
class KeyHSet(Record):
    TYPE: ClassVar[RecordType] = RecordType.HSET
    key: bytes
    pairs: Sequence[bytes]  # field, value, field, value, ...

    def in_db(self, db: int) -> Record:
        return KeyHSetDb(self.key, self.pairs, db)

    def apply(self, stores: Stores) -> None:
        stores.keyspace.hset(self.key, list(self.pairs))


@register
@dataclass(slots=True)
class KeyHDel(Record):
    TYPE: ClassVar[RecordType] = RecordType.HDEL
    key: bytes
    hash_fields: Sequence[bytes]  # only the fields that were present; "fields" on disk

    def fields(self) -> dict[str, Any]:
        return {"key": self.key, "fields": self.hash_fields}

    @classmethod
    def decode(cls, fields: Mapping[str, Any]) -> KeyHDel:
        return cls(bytes(fields["key"]), tuple(bytes(f) for f in fields["fields"]))

    def in_db(self, db: int) -> Record:
        return KeyHDelDb(self.key, self.hash_fields, db)

    def apply(self, stores: Stores) -> None:
        stores.keyspace.hdel(self.key, list(self.hash_fields))


# ---- SSM.PREFIX.* recurrent state ---------------------------------------------------------------
@register
@dataclass(slots=True)
class SsmStore(Record):
    TYPE: ClassVar[RecordType] = RecordType.SSM_PREFIX_STORE
    ns: str
    layer: int
    state: bytes  # the opaque recurrent-state blob

    def apply(self, stores: Stores) -> None:
        stores.ssm.restore(self.ns, self.layer, self.state)


@register
@dataclass(slots=True)
class SsmDrop(Record):
    TYPE: ClassVar[RecordType] = RecordType.SSM_PREFIX_DROP
    ns: str
    layer: int | None = None  # None: every layer of ns (written as n, not left out)

    def apply(self, stores: Stores) -> None:
        stores.ssm.drop(self.ns, self.layer)


@register
@dataclass(slots=True)
class SsmEvict(Record):
    TYPE: ClassVar[RecordType] = RecordType.SSM_PREFIX_EVICT
    namespaces: Sequence[str]

    def apply(self, stores: Stores) -> None:
        stores.ssm.evict(list(self.namespaces))


@register
@dataclass(slots=True)
class SsmFlush(Record):
    TYPE: ClassVar[RecordType] = RecordType.SSM_PREFIX_FLUSH

    def apply(self, stores: Stores) -> None:
        stores.ssm.flush()


# ---- FT.* search indexes ------------------------------------------------------------------------
@register
@dataclass(slots=True)
class FtCreate(Record):
    TYPE: ClassVar[RecordType] = RecordType.FT_CREATE
    index: str
    args: Sequence[bytes]  # the FT.CREATE words after the index name

    def apply(self, stores: Stores) -> None:
        stores.search.restore_create(self.index, list(self.args))


@register
@dataclass(slots=True)
class FtDropIndex(Record):
    TYPE: ClassVar[RecordType] = RecordType.FT_DROPINDEX
    index: str

    def apply(self, stores: Stores) -> None:
        stores.search.restore_drop(self.index)


@register
@dataclass(slots=True)
class FtGraph(Record):
    TYPE: ClassVar[RecordType] = RecordType.FT_GRAPH
    index: str
    field: str
    docs: Sequence[int]
    keys: Sequence[bytes]
    graph: bytes  # hnswlib's save_index file

    def apply(self, stores: Stores) -> None:
        stores.search.restore_graph(self.index, self.field, list(self.docs), list(self.keys), self.graph)


# ---- semantic cache ----------------------------------------------------------------------------
@register
@dataclass(slots=True)
class SemanticSet(Record):
    TYPE: ClassVar[RecordType] = RecordType.SEMANTIC_SET
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"next_id"})
    cache: str
    scope: str
    text: str
    response: bytes
    vector: bytes  # unit-norm float32, little-endian
    expire_at_ms: int  # absolute unix ms; 0 = no TTL
    created_ms: int
    meta: bytes | None
    id: int
    next_id: int | None = None  # snapshots only: the cache's next entry id

    def apply(self, stores: Stores) -> None:
        import numpy as np

        vec = np.frombuffer(self.vector, dtype="<f4").astype(np.float32)
        stores.semantic.restore(self.cache, self.scope, self.text, self.response, vec, self.id,
                                self.expire_at_ms, self.created_ms, self.meta, next_id=self.next_id)


@register
@dataclass(slots=True)
class SemanticDel(Record):
    TYPE: ClassVar[RecordType] = RecordType.SEMANTIC_DEL
    cache: str
    ids: Sequence[int]

    def apply(self, stores: Stores) -> None:
        stores.semantic.delete(self.cache, list(self.ids))


@register
@dataclass(slots=True)
class SemanticFlush(Record):
    TYPE: ClassVar[RecordType] = RecordType.SEMANTIC_FLUSH
    cache: str

    def apply(self, stores: Stores) -> None:
        stores.semantic.flush(self.cache)


@register
@dataclass(slots=True)
class SemanticFlushAll(Record):
    TYPE: ClassVar[RecordType] = RecordType.SEMANTIC_FLUSHALL

    def apply(self, stores: Stores) -> None:
        stores.semantic.flush_all()



# ---- numbered databases (SELECT n) and keyspace moves ------------------------------------------
@register
@dataclass(slots=True)
class KeySetDb(Record):
    TYPE: ClassVar[RecordType] = RecordType.SET_DB
    key: bytes
    value: bytes
    expire_at_ms: int | None
    db: int

    def apply(self, stores: Stores) -> None:
        stores.db(self.db).set(self.key, self.value, self.expire_at_ms)


@register
@dataclass(slots=True)
class KeysDelDb(Record):
    TYPE: ClassVar[RecordType] = RecordType.DEL_DB
    keys: Sequence[bytes]
    db: int

    def apply(self, stores: Stores) -> None:
        stores.db(self.db).delete(list(self.keys))


@register
@dataclass(slots=True)
class KeyExpireDb(Record):
    TYPE: ClassVar[RecordType] = RecordType.EXPIRE_DB
    key: bytes
    expire_at_ms: int | None
    db: int

    def apply(self, stores: Stores) -> None:
        stores.db(self.db).expire(self.key, self.expire_at_ms)


@register
@dataclass(slots=True)
class KeysFlushDb(Record):
    TYPE: ClassVar[RecordType] = RecordType.FLUSHDB
    db: int

    def apply(self, stores: Stores) -> None:
        stores.db(self.db).flush()


@register
@dataclass(slots=True)
class KeyHSetDb(Record):
    TYPE: ClassVar[RecordType] = RecordType.HSET_DB
    key: bytes
    pairs: Sequence[bytes]
    db: int

    def apply(self, stores: Stores) -> None:
        stores.db(self.db).hset(self.key, list(self.pairs))


@register
@dataclass(slots=True)
class KeyHDelDb(Record):
    TYPE: ClassVar[RecordType] = RecordType.HDEL_DB
    key: bytes
    hash_fields: Sequence[bytes]  # "fields" on disk, like HDEL
    db: int

    def fields(self) -> dict[str, Any]:
        return {"key": self.key, "fields": self.hash_fields, "db": self.db}

    @classmethod
    def decode(cls, fields: Mapping[str, Any]) -> KeyHDelDb:
        return cls(bytes(fields["key"]), tuple(bytes(f) for f in fields["fields"]), fields["db"])

    def apply(self, stores: Stores) -> None:
        stores.db(self.db).hdel(self.key, list(self.hash_fields))


@register
@dataclass(slots=True)
class KeysSwapDb(Record):
    TYPE: ClassVar[RecordType] = RecordType.SWAPDB
    a: int
    b: int

    def apply(self, stores: Stores) -> None:
        stores.swap_dbs(self.a, self.b)


@register
@dataclass(slots=True)
class KeyRename(Record):
    TYPE: ClassVar[RecordType] = RecordType.RENAME
    db: int
    src: bytes
    dst: bytes

    def apply(self, stores: Stores) -> None:
        stores.db(self.db).rename(self.src, self.dst)


@register
@dataclass(slots=True)
class KeyCopy(Record):
    TYPE: ClassVar[RecordType] = RecordType.COPY
    src_db: int
    src: bytes
    dst_db: int
    dst: bytes

    def apply(self, stores: Stores) -> None:
        stores.copy_key(self.src_db, self.src, self.dst_db, self.dst)


@register
@dataclass(slots=True)
class KeyMove(Record):
    TYPE: ClassVar[RecordType] = RecordType.MOVE
    src_db: int
    key: bytes
    dst_db: int

    def apply(self, stores: Stores) -> None:
        stores.move_key(self.src_db, self.key, self.dst_db)
