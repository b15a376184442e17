"""Start-up recovery: load the snapshot, then replay the WAL files in order.

Rules (Redis ``aof.c``'s): only the tail of the *last* WAL file may be cut, and
only when it looks like an interrupted append (the file ends inside a record,
or the last record's checksum fails, or only zero bytes follow). Damage
anywhere else — inside a snapshot, in an older segment, or with good data
after it — refuses to start with a ``RecoveryError`` naming the file, the
offset and the fix. With ``repair=True`` (``--wal-repair``) the WAL is cut at
the damage instead: the lost bytes are logged and kept next to it
(``<file>.cut-<offset>``, later files renamed ``*.lost``).

Replay calls ``sink(rtype, fields)`` for each record. Records with seq <=
the snapshot's ``begin_seq`` are already in it and skipped; records up to its
``end_seq`` may be reflected in a background snapshot and are applied
leniently (see snapshot.py); a failure after that is logged and counted.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pion.server.persist.files import DataLayout, fsync_dir
from pion.server.persist.reader import RecordReader
from pion.server.persist.records import record_type_name
from pion.server.persist.snapshot import SnapshotError, SnapshotReader

Sink = Callable[[int, dict[str, Any]], None]
log = logging.getLogger("pion.persist")
PROGRESS_MIN_BYTES = 64 * 1024**2
PROGRESS_INTERVAL_S = 2.0


class RecoveryError(Exception):
    """The data files cannot be loaded safely; the server must not start."""


@dataclass
class RecoveryReport:
    """What recovery found and did."""

    snapshot_records: int = 0
    snapshot_begin_seq: int = 0
    snapshot_end_seq: int = 0
    wal_records: int = 0
    skipped_records: int = 0
    lenient_failures: int = 0
    failures: int = 0
    last_seq: int = 0
    active_first_seq: int | None = None
    bytes_read: int = 0
    seconds: float = 0.0
    cuts: list[str] = field(default_factory=list)

    def summary(self) -> str:
        mb = self.bytes_read / 1024**2
        rate = mb / self.seconds if self.seconds > 0 else 0.0
        return (f"recovered {self.snapshot_records} snapshot records and {self.wal_records} WAL records "
                f"({mb:.1f} MB in {self.seconds:.2f}s, {rate:.0f} MB/s); last seq {self.last_seq}"
                + (f"; {self.failures} records could not be applied" if self.failures else ""))


class _Progress:
    """Logs 'recovery: X of Y MB' every few seconds for large stores."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.last_log = self.started
        self.enabled = total >= PROGRESS_MIN_BYTES
        if self.enabled:
            log.info("recovery: loading %.1f MB of snapshot and WAL", total / 1024**2)

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        now = time.monotonic()
        if self.enabled and now - self.last_log >= PROGRESS_INTERVAL_S:
            self.last_log = now
            rate = self.done / 1024**2 / max(now - self.started, 1e-9)
            log.info("recovery: %.1f of %.1f MB (%.0f%%), %.0f MB/s", self.done / 1024**2,
                     self.total / 1024**2, 100.0 * self.done / max(self.total, 1), rate)


def _apply(sink: Sink, rtype: int, fields: dict[str, Any], where: str, lenient: bool,
           report: RecoveryReport) -> None:
    try:
        sink(rtype, fields)
    except RecoveryError:  # the sink says the data cannot be loaded under this configuration
        raise
    except Exception as e:  # a record the store refuses must not stop start-up
        if lenient:
            report.lenient_failures += 1
            log.debug("recovery: %s at %s already superseded in the snapshot: %s",
                      record_type_name(rtype), where, e)
        else:
            report.failures += 1
            log.warning("recovery: %s at %s could not be applied: %s", record_type_name(rtype), where, e)


def recover(layout: DataLayout, sink: Sink, *, repair: bool = False,
            replay_wal: bool = True) -> RecoveryReport:
    """Load ``layout``'s snapshot and WAL into ``sink``; raises RecoveryError on damage.

    ``replay_wal=False`` (``--appendonly no``): the snapshot only, as Redis with AOF off loads
    its RDB file and ignores the AOF; WAL files found are logged and left untouched."""
    started = time.monotonic()
    report = RecoveryReport()
    tmp = layout.snapshot_path.with_name(layout.snapshot_path.name + ".tmp")
    if tmp.exists():
        log.warning("recovery: removing %s left by an interrupted snapshot", tmp)
        tmp.unlink()
    wal_files = layout.wal_files()
    if not replay_wal:
        if wal_files:
            log.warning("recovery: --appendonly no: not replaying %d bytes of WAL (%s); a start with "
                        "--appendonly yes would, a SAVE or BGSAVE removes them",
                        sum(p.stat().st_size for p in wal_files), ", ".join(p.name for p in wal_files))
        wal_files = []
    snap = layout.snapshot_path if layout.snapshot_path.exists() else None
    total = (snap.stat().st_size if snap else 0) + sum(p.stat().st_size for p in wal_files)
    progress = _Progress(total)
    if snap is not None:
        _load_snapshot(snap, sink, report, progress)
    if replay_wal:
        _replay_wal(layout, wal_files, sink, report, progress, repair)
    report.bytes_read = progress.done
    report.seconds = time.monotonic() - started
    log.info("recovery: %s", report.summary())
    return report


def _load_snapshot(path: Path, sink: Sink, report: RecoveryReport, progress: _Progress) -> None:
    try:
        reader = SnapshotReader(path)
        for record in reader:
            _apply(sink, record.rtype, record.fields, f"{path.name}:{record.offset}", False, report)
            report.snapshot_records += 1
            progress.advance(record.size)
    except (SnapshotError, OSError) as e:
        raise RecoveryError(
            f"cannot load snapshot {e}. Refusing to start. Fix: restore this file from a backup, or move it "
            f"out of the data directory to start from the WAL alone (what only the snapshot held is lost)."
        ) from e
    info = reader.info
    if info is not None:
        report.snapshot_begin_seq = info.begin_seq
        report.snapshot_end_seq = info.end_seq
        report.last_seq = max(info.begin_seq, info.end_seq)
    progress.advance(path.stat().st_size - progress.done)


def _replay_wal(layout: DataLayout, files: list[Path], sink: Sink, report: RecoveryReport,
                progress: _Progress, repair: bool) -> None:
    begin, end_seq = report.snapshot_begin_seq, report.snapshot_end_seq
    prev_seq = begin
    for index, path in enumerate(files):
        is_last = index == len(files) - 1
        reader = RecordReader(path)
        first_in_file: int | None = None
        for record in reader:
            progress.advance(record.size)
            if first_in_file is None:
                first_in_file = record.seq
            if record.seq <= prev_seq:
                report.skipped_records += 1
                continue
            prev_seq = record.seq
            _apply(sink, record.rtype, record.fields, f"{path.name}:{record.offset}", record.seq <= end_seq, report)
            report.wal_records += 1
        if path == layout.wal_path:
            report.active_first_seq = first_in_file
        end = reader.end
        if end is None or end.kind == "clean":
            continue
        if end.kind == "torn" and is_last:
            lost = reader.size - end.offset
            _truncate(path, end.offset)
            msg = f"{path.name}: cut a torn record at offset {end.offset} ({lost} bytes): {end.reason}"
            log.warning("recovery: %s", msg)
            report.cuts.append(msg)
            continue
        later = files[index + 1:]
        lost = reader.size - end.offset + sum(p.stat().st_size for p in later)
        if not repair:
            raise RecoveryError(
                f"WAL file {path} is damaged at offset {end.offset}: {end.reason}. "
                f"{reader.size - end.offset} bytes follow in this file and {len(later)} later WAL file(s) "
                f"hold more. Refusing to start. Fix: restore the data directory from a backup, or start "
                f"once with --wal-repair to cut the WAL at offset {end.offset} (losing {lost} bytes of "
                f"records written after that point; they are kept in {path.name}.cut-{end.offset})."
            )
        _cut_for_repair(path, end.offset, later, lost, end.reason)
        report.cuts.append(f"{path.name}: repaired at offset {end.offset}, {lost} bytes set aside")
        if layout.wal_path in later:
            report.active_first_seq = None
        break
    report.last_seq = max(report.last_seq, prev_seq)


def _truncate(path: Path, offset: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def _cut_for_repair(path: Path, offset: int, later: list[Path], lost: int, reason: str) -> None:
    """--wal-repair: keep the damaged tail and later files aside, then cut the WAL at ``offset``."""
    keep = path.with_name(f"{path.name}.cut-{offset}")
    log.warning("recovery: --wal-repair: %s is damaged at offset %d (%s); cutting it there and losing "
                "%d bytes of later records (kept in %s%s)", path, offset, reason, lost, keep.name,
                "".join(f", {p.name}.lost" for p in later))
    with open(path, "rb") as src, open(keep, "wb") as dst:
        src.seek(offset)
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    for other in later:
        other.rename(other.with_name(other.name + ".lost"))
    _truncate(path, offset)
    fsync_dir(path.parent)
