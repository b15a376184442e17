"""Snapshots: SAVE/BGSAVE round trips, failures that change nothing, fuzzy BGSAVE under writes."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from persist.toystore import ToyStore
from pion.common.errors import CommandError
from pion.server.persist import PersistOptions, Persistence, RecordType, RecoveryError, snapshot
from pion.server.persist.files import DataLayout
from pion.server.persist.snapshot import SnapshotReader, SnapshotWriter


def _open(path: Path, **kwargs: Any) -> tuple[Persistence, ToyStore]:
    persist = Persistence(PersistOptions(path, appendfsync="no", **kwargs))
    store = ToyStore(persist)
    persist.recover(store.apply)
    persist.set_snapshot_source(store.snapshot_records)
    return persist, store


def _reload(path: Path) -> ToyStore:
    persist, store = _open(path)
    persist.close()
    store.persist = None
    return store


def _fill(store: ToyStore, rng: random.Random, n: int = 20) -> None:
    for i in range(n):
        sid = f"s{i % 4}"
        if sid not in store.sessions:
            store.create(sid, 8)
        layer = rng.randrange(3)
        rows = store.sessions[sid].get(layer, bytearray())
        start = rng.randrange(len(rows) // 8 + 1)
        store.store(sid, layer, start, rng.randbytes(8 * rng.randrange(1, 6)))
        store.set(f"key{i % 5}".encode(), rng.randbytes(rng.randrange(1, 40)))


def test_save_then_reload_gives_the_same_state_and_empties_the_wal(tmp_path: Path) -> None:
    persist, store = _open(tmp_path)
    _fill(store, random.Random(1))
    store.drop("s1")
    assert persist.wal_bytes > 0
    persist.save()
    assert persist.wal_bytes == 0
    assert DataLayout(tmp_path).segments() == []
    store.set(b"after-save", b"in the wal")
    persist.close()
    assert _reload(tmp_path).state() == store.state()


def test_a_failed_save_leaves_the_previous_snapshot_and_the_wal_as_they_were(tmp_path: Path) -> None:
    persist, store = _open(tmp_path)
    _fill(store, random.Random(2))
    persist.save()
    first = DataLayout(tmp_path).snapshot_path.read_bytes()
    store.set(b"later", b"only in the wal")
    expected = store.state()

    def failing_source() -> Iterator[tuple[RecordType, dict[str, Any]]]:
        yield from list(store.snapshot_records())[:2]
        raise OSError(28, "No space left on device")

    persist.set_snapshot_source(failing_source)
    with pytest.raises(CommandError, match="No space left on device"):
        persist.save()
    assert persist.info()["last_bgsave_status"] == "err"
    assert DataLayout(tmp_path).snapshot_path.read_bytes() == first
    assert not (tmp_path / "pion.vstore.0.tmp").exists()
    persist.close()
    assert _reload(tmp_path).state() == expected


def test_save_to_a_relative_path_writes_a_copy_and_keeps_the_wal(tmp_path: Path) -> None:
    persist, store = _open(tmp_path)
    _fill(store, random.Random(3))
    wal_before = persist.wal_bytes
    persist.save("backup.snap")
    assert persist.wal_bytes == wal_before
    reader = SnapshotReader(tmp_path / "backup.snap")
    assert sum(1 for _ in reader) > 0
    with pytest.raises(CommandError, match="inside --dir"):
        persist.save("../escape")
    with pytest.raises(CommandError, match="inside --dir"):
        persist.save("/tmp/absolute")
    persist.close()


def test_a_damaged_snapshot_refuses_to_start_naming_the_file_and_offset(tmp_path: Path) -> None:
    persist, store = _open(tmp_path)
    _fill(store, random.Random(4))
    persist.save()
    persist.close()
    snap = DataLayout(tmp_path).snapshot_path
    data = bytearray(snap.read_bytes())
    data[len(data) // 2] ^= 0x10
    snap.write_bytes(bytes(data))
    with pytest.raises(RecoveryError, match=r"pion\.vstore\.0: offset \d+") as err:
        _reload(tmp_path)
    assert "move it out of the data directory" in str(err.value)


def test_a_truncated_snapshot_without_its_end_record_refuses_to_start(tmp_path: Path) -> None:
    persist, store = _open(tmp_path)
    _fill(store, random.Random(5))
    persist.save()
    persist.close()
    snap = DataLayout(tmp_path).snapshot_path
    snap.write_bytes(snap.read_bytes()[:-20])
    with pytest.raises(RecoveryError, match="damaged or incomplete"):
        _reload(tmp_path)


def test_bgsave_under_concurrent_writes_recovers_to_the_final_state(tmp_path: Path) -> None:
    persist, store = _open(tmp_path)
    rng = random.Random(6)
    _fill(store, rng, 200)

    async def writer() -> None:
        for i in range(300):
            _fill(store, rng, 1)
            if i % 50 == 25:
                store.drop(f"s{i % 4}")
            await asyncio.sleep(0)

    async def main() -> None:
        task = persist.start_bgsave()
        with pytest.raises(CommandError, match="already in progress"):
            persist.save()
        await asyncio.gather(task, writer())

    import pion.server.persist.manager as manager
    slice_s, manager.BGSAVE_SLICE_S = manager.BGSAVE_SLICE_S, 0.0  # yield to the writer after every record
    try:
        asyncio.run(main())
    finally:
        manager.BGSAVE_SLICE_S = slice_s
    assert persist.saves == 1
    persist.close()
    assert _reload(tmp_path).state() == store.state()


def test_a_crash_in_the_middle_of_bgsave_leaves_old_snapshot_plus_segments(tmp_path: Path) -> None:
    persist, store = _open(tmp_path)
    _fill(store, random.Random(7))
    persist.save()
    _fill(store, random.Random(8))
    expected = store.state()
    assert persist.wal is not None
    persist.wal.rotate()  # what BGSAVE does first; then the process dies mid-write
    (tmp_path / "pion.vstore.0.tmp").write_bytes(b"PIONSNAP half written")
    persist.wal.sync_now()
    os.close(persist.wal._fd)  # no clean shutdown
    assert _reload(tmp_path).state() == expected
    assert not (tmp_path / "pion.vstore.0.tmp").exists()


def test_a_crash_after_the_rename_but_before_segment_removal_replays_nothing_twice(tmp_path: Path) -> None:
    persist, store = _open(tmp_path)
    _fill(store, random.Random(9))
    assert persist.wal is not None
    segment_data = persist.wal.layout.wal_path.read_bytes()
    persist.save()
    store.set(b"key0", b"newer than the snapshot")
    persist.close()
    DataLayout(tmp_path).segment_path(1).write_bytes(segment_data)  # the segment SAVE should have removed
    assert _reload(tmp_path).state() == store.state()


def test_worked_snapshot_example_from_the_format_doc_has_these_exact_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot.time, "time", lambda: 1_700_000_000.0)
    writer = SnapshotWriter(tmp_path / "pion.vstore.0", worker=0, begin_seq=3)
    writer.add(RecordType.SET, {"key": b"k", "value": b"v", "expire_at_ms": None})
    writer.commit(end_seq=3)
    data = (tmp_path / "pion.vstore.0").read_bytes()
    assert len(data) == 193
    assert data[:36].hex(" ") == ("50 49 4f 4e 53 4e 41 50 02 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00 "
                                  "00 68 e5 cf 8b 01 00 00 f9 69 2a 2c")
    assert data[36:60].hex(" ") == "50 52 45 43 01 06 00 00 2e 00 00 00 00 00 00 00 00 00 00 00 d6 85 11 2b"
    assert data[110:134].hex(" ") == "50 52 45 43 01 7f 00 00 37 00 00 00 00 00 00 00 00 00 00 00 ed 14 9a e2"
    assert data[-4:].hex(" ") == "63 09 94 0b"
