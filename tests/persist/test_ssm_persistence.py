"""SSM.PREFIX records: a WAL cut at every byte replays to the state of exactly the records before
the cut, through the same sink the server uses; snapshot records rebuild the same store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pion.server.persist import RecordType
from pion.server.persist.binding import make_sink, snapshot_fields
from pion.server.persist.files import DataLayout
from pion.server.persist.recovery import recover
from pion.server.persist.wal import WalWriter
from pion.server.store.ssm import SsmStateStore
from pion.server.store.stores import Stores

RECORDS: list[tuple[RecordType, dict[str, Any]]] = [
    (RecordType.SSM_PREFIX_STORE, {"ns": "a", "layer": 0, "state": b"\x01\x02\x03"}),
    (RecordType.SSM_PREFIX_STORE, {"ns": "a", "layer": 3, "state": b"\x04" * 9}),
    (RecordType.SSM_PREFIX_STORE, {"ns": "b", "layer": 1, "state": b"\x05\x06"}),
    (RecordType.SSM_PREFIX_DROP, {"ns": "a", "layer": 0}),
    (RecordType.SSM_PREFIX_EVICT, {"namespaces": ("b",)}),
    (RecordType.SSM_PREFIX_STORE, {"ns": "c", "layer": 2, "state": b"\x07"}),
    (RecordType.SSM_PREFIX_DROP, {"ns": "c", "layer": None}),
    (RecordType.SSM_PREFIX_FLUSH, {}),
    (RecordType.SSM_PREFIX_STORE, {"ns": "d", "layer": 0, "state": b"\x08\x09"}),
]


def contents(store: SsmStateStore) -> dict[str, dict[int, bytes]]:
    return {entry.ns: dict(entry.layers) for entry in store.iter_entries()}


def stores_with(store: SsmStateStore) -> Stores:
    """Empty stores around ``store`` (the recovery sink and the snapshot walk take them all)."""
    stores = Stores.make()
    return Stores(stores.vstore, stores.keyspace, stores.semantic, stores.search, store, stores.attend)


def applied(n: int) -> dict[str, dict[int, bytes]]:
    """The store after the first ``n`` records, applied directly."""
    store = SsmStateStore()
    sink = make_sink(stores_with(store))
    for rtype, fields in RECORDS[:n]:
        sink(rtype, dict(fields))
    return contents(store)


def test_cutting_a_wal_of_ssm_records_at_every_byte_recovers_exactly_a_prefix(fast_dir: Path) -> None:
    source = DataLayout(fast_dir / "src")
    source.data_dir.mkdir()
    wal = WalWriter(source, "no")
    ends = []
    for rtype, fields in RECORDS:
        wal.append(rtype, fields)
        ends.append(wal.active_bytes)
    wal.close()
    data = source.wal_path.read_bytes()
    cut = DataLayout(fast_dir / "cut")
    cut.data_dir.mkdir()
    for offset in range(len(data) + 1):
        cut.wal_path.write_bytes(data[:offset])
        store = SsmStateStore()
        recover(cut, make_sink(stores_with(store)))
        complete = sum(1 for end in ends if end <= offset)
        assert contents(store) == applied(complete), f"cut at {offset}"


def test_snapshot_records_rebuild_the_same_store_in_lru_order() -> None:
    store = SsmStateStore()
    store.store("x", 1, b"one")
    store.store("y", 0, b"two")
    store.store("x", 0, b"three")  # x is now the most recently used
    records = list(snapshot_fields(stores_with(store)))
    assert [(int(t), f["ns"], f["layer"]) for t, f in records] == [
        (int(RecordType.SSM_PREFIX_STORE), "y", 0), (int(RecordType.SSM_PREFIX_STORE), "x", 0),
        (int(RecordType.SSM_PREFIX_STORE), "x", 1)]
    rebuilt = SsmStateStore()
    sink = make_sink(stores_with(rebuilt))
    for rtype, fields in records:
        sink(rtype, fields)
    assert contents(rebuilt) == contents(store)
    assert [e.ns for e in rebuilt.iter_entries()] == ["y", "x"]
