"""WAL append + recovery: prefixes survive every cut, damage elsewhere refuses to start."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from pion.server.persist import PersistOptions, Persistence, RecordType, RecoveryError
from pion.server.persist.files import DataLayout
from pion.server.persist.recovery import recover
from pion.server.persist.wal import WalWriter


def _records(n: int) -> list[tuple[RecordType, dict[str, Any]]]:
    out: list[tuple[RecordType, dict[str, Any]]] = []
    for i in range(n):
        if i % 3 == 0:
            out.append((RecordType.SET, {"key": f"k{i}".encode(), "value": bytes([i]) * (i * 7 % 50),
                                         "expire_at_ms": None}))
        elif i % 3 == 1:
            out.append((RecordType.V_STOREBATCH, {"sid": "s", "layer": i, "start_id": 0, "n_rows": 1,
                                                  "rows": bytes(range(i, i + 16))}))
        else:
            out.append((RecordType.DEL, {"keys": (f"k{i - 2}".encode(),)}))
    return out


def _normalize(fields: dict[str, Any]) -> dict[str, Any]:
    def norm(v: Any) -> Any:
        if isinstance(v, memoryview):
            return bytes(v)
        if isinstance(v, tuple):
            return tuple(norm(x) for x in v)
        return v
    return {k: norm(v) for k, v in fields.items()}


def _write_wal(layout: DataLayout, records: list[tuple[RecordType, dict[str, Any]]]) -> list[int]:
    """Append records; returns the file offset after each one."""
    wal = WalWriter(layout, "no")
    ends = []
    for rtype, fields in records:
        wal.append(rtype, fields)
        ends.append(wal.active_bytes)
    wal.close()
    return ends


def _replay(layout: DataLayout, repair: bool = False) -> list[tuple[int, dict[str, Any]]]:
    seen: list[tuple[int, dict[str, Any]]] = []
    recover(layout, lambda rtype, fields: seen.append((rtype, _normalize(fields))), repair=repair)
    return seen


def test_cutting_a_wal_at_every_byte_recovers_exactly_a_prefix(fast_dir: Path) -> None:
    records = _records(9)
    source = DataLayout(fast_dir / "src")
    source.data_dir.mkdir()
    ends = _write_wal(source, records)
    data = source.wal_path.read_bytes()
    assert len(data) == ends[-1]
    expected = [(int(t), _normalize(f)) for t, f in records]
    cut_dir = DataLayout(fast_dir / "cut")
    cut_dir.data_dir.mkdir()
    for offset in range(len(data) + 1):
        cut_dir.wal_path.write_bytes(data[:offset])
        complete = sum(1 for end in ends if end <= offset)
        assert _replay(cut_dir) == expected[:complete], f"cut at {offset}"
        # The torn tail was cut off, so the file ends on a record boundary.
        assert cut_dir.wal_path.stat().st_size == (ends[complete - 1] if complete else 0)


def test_appends_continue_the_sequence_after_recovery(tmp_path: Path) -> None:
    persist = Persistence(PersistOptions(tmp_path, appendfsync="no"))
    persist.recover(lambda t, f: None)
    assert persist.append(RecordType.FLUSHALL, {}) == 1
    assert persist.append(RecordType.FLUSHALL, {}) == 2
    persist.close()
    again = Persistence(PersistOptions(tmp_path, appendfsync="no"))
    report = again.recover(lambda t, f: None)
    assert report.wal_records == 2
    assert again.append(RecordType.FLUSHALL, {}) == 3
    again.close()


def test_a_zero_filled_tail_is_cut_like_a_torn_record(tmp_path: Path) -> None:
    layout = DataLayout(tmp_path)
    ends = _write_wal(layout, _records(4))
    with open(layout.wal_path, "ab") as f:
        f.write(b"\0" * 4096)
    assert len(_replay(layout)) == 4
    assert layout.wal_path.stat().st_size == ends[-1]


def test_a_torn_tail_is_cut_with_a_log_line_naming_the_file_and_offset(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    layout = DataLayout(tmp_path)
    ends = _write_wal(layout, _records(3))
    with open(layout.wal_path, "ab") as f:
        f.write(b"PREC\x01")  # a crash five bytes into the next record's header
    with caplog.at_level(logging.WARNING, logger="pion.persist"):
        assert len(_replay(layout)) == 3
    assert f"recovery: pion.vstore.0.wal: cut a torn record at offset {ends[-1]} (5 bytes)" in caplog.text


def test_damage_in_the_middle_refuses_to_start_naming_file_offset_and_fix(tmp_path: Path) -> None:
    layout = DataLayout(tmp_path)
    ends = _write_wal(layout, _records(6))
    data = bytearray(layout.wal_path.read_bytes())
    data[ends[2] + 30] ^= 0xFF  # inside record 3's payload; records 4..6 follow
    layout.wal_path.write_bytes(bytes(data))
    with pytest.raises(RecoveryError) as err:
        _replay(layout)
    message = str(err.value)
    assert str(layout.wal_path) in message
    assert f"offset {ends[2]}" in message
    assert "--wal-repair" in message
    assert layout.wal_path.stat().st_size == len(data)  # nothing was cut without permission


def test_wal_repair_cuts_at_the_damage_and_keeps_the_lost_bytes_aside(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    layout = DataLayout(tmp_path)
    records = _records(6)
    ends = _write_wal(layout, records)
    data = bytearray(layout.wal_path.read_bytes())
    data[ends[2] + 1] ^= 0xFF  # record 3's header
    layout.wal_path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="pion.persist"):
        seen = _replay(layout, repair=True)
    assert seen == [(int(t), _normalize(f)) for t, f in records[:3]]
    assert layout.wal_path.stat().st_size == ends[2]
    assert (tmp_path / f"pion.vstore.0.wal.cut-{ends[2]}").read_bytes() == bytes(data[ends[2]:])
    assert "losing" in caplog.text


def test_a_torn_older_segment_refuses_to_start(tmp_path: Path) -> None:
    layout = DataLayout(tmp_path)
    ends = _write_wal(layout, _records(3))
    data = layout.wal_path.read_bytes()
    layout.segment_path(1).write_bytes(data[: ends[1] + 5])  # torn, but not the last file
    layout.wal_path.write_bytes(b"")
    with pytest.raises(RecoveryError, match="is damaged at offset"):
        _replay(layout)


def test_segments_and_the_active_wal_replay_in_sequence_order(tmp_path: Path) -> None:
    persist = Persistence(PersistOptions(tmp_path, appendfsync="no"))
    persist.recover(lambda t, f: None)
    records = _records(6)
    for rtype, fields in records[:3]:
        persist.append(rtype, fields)
    assert persist.wal is not None
    assert persist.wal.rotate() == 3
    for rtype, fields in records[3:]:
        persist.append(rtype, fields)
    persist.close()
    layout = DataLayout(tmp_path)
    assert [p.name for p in layout.wal_files()] == ["pion.vstore.0.wal.00000000000000000001", "pion.vstore.0.wal"]
    assert _replay(layout) == [(int(t), _normalize(f)) for t, f in records]


def test_recovery_of_a_large_store_logs_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    import pion.server.persist.recovery as recovery
    layout = DataLayout(tmp_path)
    _write_wal(layout, _records(30))
    monkeypatch.setattr(recovery, "PROGRESS_MIN_BYTES", 0)  # "large" = everything, for the test
    monkeypatch.setattr(recovery, "PROGRESS_INTERVAL_S", 0.0)
    with caplog.at_level(logging.INFO, logger="pion.persist"):
        _replay(layout)
    progress = [r.getMessage() for r in caplog.records if "% " in r.getMessage() or "%)" in r.getMessage()]
    assert len(progress) >= 10
    assert progress[-1].startswith("recovery: ")
    assert "recovered 0 snapshot records and 30 WAL records" in caplog.text
