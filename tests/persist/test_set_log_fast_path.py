"""A plain SET is logged through the journal's record-free ``log_set`` (issue 13): the WAL
must hold exactly the bytes the ``KeySet`` record path writes, and only database 0 takes it."""

from __future__ import annotations

from pathlib import Path

from pion.server.persist import PersistOptions, Persistence
from pion.server.persist.binding import WalJournal, attach, make_sink
from pion.server.store.journal import NullJournal
from pion.server.store.keyspace import Keyspace
from pion.server.store.records import KeySet, KeySetDb, Record
from pion.server.store.stores import Stores

WAL = "pion.vstore.0.wal"
FAR_MS = 4_102_444_800_000  # 2100-01-01
# (key, value, expire_at_ms): empty, binary, the 1023/1024-byte edge of the pre-encoded
# payload, a large value (the field-map path), a TTL, a long key.
SETS: list[tuple[bytes, bytes, int | None]] = [
    (b"a", b"1", None),
    (b"empty", b"", None),
    (b"bin\x00key", bytes(range(256)), None),
    (b"edge1023", b"x" * 1023, None),
    (b"edge1024", b"y" * 1024, None),
    (b"big", bytes(range(256)) * 20, None),
    (b"ttl", b"v", FAR_MS),
    (b"k" * 1024, b"long key", FAR_MS),
]


def _open(data_dir: Path) -> tuple[Stores, Persistence]:
    data_dir.mkdir(parents=True)
    stores = Stores.make()
    persist = Persistence(PersistOptions(data_dir, 0, "no"))
    persist.recover(make_sink(stores))
    attach(stores, persist)
    persist.enable_batching()
    return stores, persist


def test_a_plain_set_writes_the_same_wal_bytes_as_its_keyset_record(tmp_path: Path) -> None:
    fast_stores, fast = _open(tmp_path / "fast")
    _, by_record = _open(tmp_path / "record")
    record_journal = WalJournal(by_record)
    for key, value, deadline in SETS:
        fast_stores.keyspace.set(key, value, expire_at_ms=deadline)
        record_journal.append(KeySet(key, value, deadline))
    for persist in (fast, by_record):
        persist.flush_batch()
        persist.close()
    fast_wal = (tmp_path / "fast" / WAL).read_bytes()
    assert fast_wal == (tmp_path / "record" / WAL).read_bytes()
    assert len(fast_wal) > sum(len(k) + len(v) for k, v, _ in SETS)


def test_keys_set_through_the_fast_path_come_back_after_recovery(tmp_path: Path) -> None:
    stores, persist = _open(tmp_path / "data")
    for key, value, deadline in SETS:
        stores.keyspace.set(key, value, expire_at_ms=deadline)
    stores.keyspace.set(b"a", b"2", keep_ttl=True)
    persist.flush_batch()
    persist.close()
    reloaded = Stores.make()
    Persistence(PersistOptions(tmp_path / "data", 0, "no")).recover(make_sink(reloaded))
    expected = {key: value for key, value, _ in SETS} | {b"a": b"2"}
    assert {key: reloaded.keyspace.get(key) for key in expected} == expected
    assert reloaded.keyspace.expire_at_ms(b"ttl") == FAR_MS
    assert reloaded.keyspace.expire_at_ms(b"a") is None


class _Recording:
    """A journal with both entry points, recording which one each SET used."""

    durable = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def append(self, record: Record) -> None:
        self.calls.append(("append", record))

    def log_set(self, key: bytes, value: bytes, expire_at_ms: int | None) -> None:
        self.calls.append(("log_set", (key, value, expire_at_ms)))


def test_database_0_uses_log_set_and_other_databases_log_their_set_db_record() -> None:
    journal = _Recording()
    db0, db2 = Keyspace(journal, db=0), Keyspace(db=2)
    db2.journal = journal  # attached later, as persist/binding.attach does
    db0.set(b"k", b"v")
    db2.set(b"k", b"w", expire_at_ms=FAR_MS)
    assert journal.calls == [("log_set", (b"k", b"v", None)),
                             ("append", KeySetDb(b"k", b"w", FAR_MS, 2))]


def test_a_journal_without_log_set_still_gets_the_keyset_record() -> None:
    records: list[Record] = []

    class Plain:
        durable = True

        def append(self, record: Record) -> None:
            records.append(record)

    keyspace = Keyspace()
    keyspace.journal = Plain()
    keyspace.set(b"k", b"v", expire_at_ms=FAR_MS)
    keyspace.journal = NullJournal()  # detached again: nothing more is recorded
    keyspace.set(b"k2", b"v2")
    assert records == [KeySet(b"k", b"v", FAR_MS)]
    assert keyspace.get(b"k2") == b"v2"
