"""``Persistence``: the narrow API the server's commands use; the only owner of data files.

Roles, in the order a worker uses them:

* ``recover(sink)`` — once at start-up, before clients are accepted: loads the
  snapshot and replays the WAL through ``sink(rtype, fields)``, then opens the
  WAL for appending. Raises RecoveryError when the files are damaged.
* ``append(rtype, fields) -> seq`` — from journal hooks, before each mutation,
  on the event-loop thread. Raises CommandError(MISCONF) when the WAL cannot be
  written (nothing must then be changed).
* ``enable_batching()`` once, then ``flush_batch()`` before each batch of replies
  (the network layer's ``before_reply`` hook): buffered records are written once,
  and fdatasync'ed once under ``appendfsync always``, before any reply of the batch.
* ``save(path=None)`` — foreground snapshot (KV.PREFIX.SAVE, SAVE); blocks the
  loop. ``start_bgsave()`` — background snapshot (BGSAVE, and automatically
  when the WAL passes ``wal_max_bytes``). Both need ``set_snapshot_source``.
* ``info()``/``wal_bytes`` for INFO and KV.PREFIX.INFO; ``close()`` at shutdown.

With ``appendonly=False`` (``--appendonly no``, Redis's name) there is no WAL: ``recover``
loads the snapshot only and opens nothing for appending, the stores keep their null
journals (``binding.attach``), and SAVE/BGSAVE still write snapshots on request; a
snapshot at the default path then also removes WAL files an earlier ``--appendonly yes``
run left (they were not replayed, and replaying them over the new snapshot would bring
back older state).

A snapshot at the default path starts by rotating the WAL: the active file is
closed as a segment (``files.py``), the snapshot records ``begin_seq`` (the
last seq in that segment) and, once the snapshot is renamed into place and the
directory fsynced, segments up to ``begin_seq`` are deleted — that is the
"truncate the WAL" step, done only after the snapshot is durable. A crash at
any point leaves either the old snapshot plus every segment, or the new
snapshot plus (possibly) segments it already covers, which replay skips by seq.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pion.common.errors import CommandError
from pion.server.persist.files import DataLayout, fsync_dir
from pion.server.persist.records import RecordType, frame
from pion.server.persist.recovery import RecoveryReport, Sink, recover
from pion.server.persist.snapshot import SnapshotWriter
from pion.server.persist.wal import FsyncPolicy, WalWriter

SnapshotSource = Callable[[], Iterable[tuple[RecordType, Mapping[str, Any]]]]
log = logging.getLogger("pion.persist")
BGSAVE_CHUNK_BYTES = 8 * 1024**2
BGSAVE_SLICE_S = 0.005  # hand the loop back to clients at least this often while walking the store
AUTOSAVE_RETRY_S = 5.0


@dataclass(frozen=True, slots=True)
class PersistOptions:
    """Persistence settings of one worker (from ServerConfig)."""

    data_dir: Path
    worker: int = 0
    appendfsync: FsyncPolicy = "everysec"
    wal_max_bytes: int = 1024**3
    wal_repair: bool = False
    appendonly: bool = True  # False: no WAL (--appendonly no)


class Persistence:
    """WAL + snapshots + recovery for one worker."""

    def __init__(self, options: PersistOptions) -> None:
        self.options = options
        self.layout = DataLayout(options.data_dir, options.worker)
        options.data_dir.mkdir(parents=True, exist_ok=True)
        self.wal: WalWriter | None = None
        self.report: RecoveryReport | None = None
        self._source: SnapshotSource | None = None
        self._bg_task: asyncio.Task[None] | None = None
        self._bg_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pion-bgsave")
        self._autosave_after = 0.0
        self.last_save_unix = int(time.time())
        self.last_bgsave_status = "ok"
        self.last_save_seconds = 0.0
        self.saves = 0

    # -- start-up ----------------------------------------------------------------------------

    @property
    def appendonly(self) -> bool:
        """False under ``--appendonly no``: nothing is logged, the stores keep null journals."""
        return self.options.appendonly

    def recover(self, sink: Sink) -> RecoveryReport:
        """Load snapshot + WAL into ``sink``, then open the WAL for appends (before serving);
        under ``--appendonly no`` the snapshot only, and no WAL is opened."""
        report = recover(self.layout, sink, repair=self.options.wal_repair,
                         replay_wal=self.options.appendonly)
        self.report = report
        if not self.options.appendonly:
            return report
        next_seq = report.last_seq + 1
        self.wal = WalWriter(self.layout, self.options.appendfsync, next_seq=next_seq,
                             active_first_seq=report.active_first_seq)
        return report

    def set_snapshot_source(self, source: SnapshotSource) -> None:
        """The callable that walks the store and yields its records for a snapshot."""
        self._source = source

    # -- the write path ------------------------------------------------------------------------

    def _writer(self) -> WalWriter:
        if self.wal is None:
            raise RuntimeError("persistence used before recover() opened the WAL")
        return self.wal

    def _snapshot_begin(self, is_default: bool) -> tuple[int, WalWriter | None]:
        """The seq a snapshot begins at and the WAL it covers (rotated for the default path).
        Without a WAL (``--appendonly no``) nothing is logged after recovery: the seq it ended at."""
        if not self.options.appendonly:
            if self.report is None:
                raise RuntimeError("persistence used before recover()")
            return self.report.last_seq, None
        wal = self._writer()
        return (wal.rotate() if is_default else wal.last_seq), wal

    def append(self, rtype: RecordType, fields: Mapping[str, Any] | bytes) -> int:
        """Log one mutation before it is applied; CommandError(MISCONF) if the WAL write fails.

        ``fields``: the field map, or the already-encoded payload (``WalWriter.append``)."""
        wal = self.wal
        if wal is None:
            wal = self._writer()  # raises: not recovered yet
        seq = wal.append(rtype, fields)
        if wal.wal_bytes > self.options.wal_max_bytes:
            self._maybe_autosave()
        return seq

    def wal_grew(self) -> None:
        """A record was appended to ``wal`` directly (the WAL journal's plain-SET path,
        ``binding.WalJournal.log_set``) and the WAL is now over ``wal_max_bytes``: start the
        background snapshot ``append`` would have started."""
        if self.wal_bytes > self.options.wal_max_bytes:
            self._maybe_autosave()

    def enable_batching(self) -> None:
        """Buffer small records per event-loop batch; the server then calls ``flush_batch``
        before each batch of replies (see ``wal.py``, batched mode)."""
        self._writer().enable_batching()

    def flush_batch(self) -> None:
        """Write buffered records (and fsync under ``always``); CommandError(MISCONF) on failure."""
        wal = self.wal
        if wal is not None:
            wal.flush_batch()

    def batch_pending(self) -> bool:
        wal = self.wal
        return wal is not None and wal.batch_pending

    @property
    def wal_bytes(self) -> int:
        return self.wal.wal_bytes if self.wal is not None else 0

    @property
    def bgsave_in_progress(self) -> bool:
        return self._bg_task is not None and not self._bg_task.done()

    def _maybe_autosave(self) -> None:
        if self.bgsave_in_progress or self._source is None or time.monotonic() < self._autosave_after:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        log.info("WAL is %d bytes, over wal-max-bytes %d: starting a background snapshot",
                 self.wal_bytes, self.options.wal_max_bytes)
        self.start_bgsave()

    # -- snapshots -----------------------------------------------------------------------------

    def resolve_path(self, path: str | None) -> Path:
        """The snapshot path: default, or a relative path inside ``--dir`` (nothing else)."""
        if path is None:
            return self.layout.snapshot_path
        candidate = Path(path)
        resolved = (self.options.data_dir / candidate).resolve()
        root = self.options.data_dir.resolve()
        if candidate.is_absolute() or root not in resolved.parents or not candidate.name:
            raise CommandError(f"snapshot path must be a relative file path inside --dir, got '{path[:128]}'")
        return resolved

    def _require_source(self) -> SnapshotSource:
        if self._source is None:
            raise CommandError("snapshots are not available: no store is attached")
        return self._source

    def save(self, path: str | None = None) -> Path:
        """Foreground snapshot; raises CommandError (previous snapshot and WAL unchanged)."""
        source = self._require_source()
        if self.bgsave_in_progress:
            raise CommandError("Background save already in progress")
        target = self.resolve_path(path)
        is_default = target == self.layout.snapshot_path.resolve() or target == self.layout.snapshot_path
        started = time.monotonic()
        try:
            begin, wal = self._snapshot_begin(is_default)
            writer = SnapshotWriter(target, self.options.worker, begin)
        except OSError as e:
            raise CommandError(f"snapshot failed: {e.strerror or e} ({target.name}); "
                               "the previous snapshot and WAL are unchanged") from e
        try:
            for rtype, fields in source():
                writer.add(rtype, fields)
            writer.commit(end_seq=begin)
        except Exception as e:
            writer.abort()
            self.last_bgsave_status = "err"
            log.error("snapshot to %s failed: %s; the previous snapshot and WAL are unchanged", target, e)
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise CommandError(f"snapshot failed: {reason} ({target.name}); "
                               "the previous snapshot and WAL are unchanged") from e
        self._saved(target, writer, begin, started, wal, is_default)
        return target

    def _saved(self, target: Path, writer: SnapshotWriter, begin: int, started: float,
               wal: WalWriter | None, is_default: bool) -> None:
        removed: list[str] = []
        if is_default:  # the snapshot is durable: drop the WAL files it covers
            removed = wal.drop_segments_upto(begin) if wal is not None else self._drop_unreplayed_wal()
        self.last_save_seconds = time.monotonic() - started
        self.last_save_unix = int(time.time())
        self.last_bgsave_status = "ok"
        self.saves += 1
        log.info("snapshot saved to %s: %d records, %.1f MB in %.2fs%s", target, writer.records,
                 writer.bytes_written / 1024**2, self.last_save_seconds,
                 f"; WAL segments removed: {', '.join(removed)}" if removed else "")

    def start_bgsave(self) -> asyncio.Task[None]:
        """Start a background snapshot on the running loop; CommandError if one is running."""
        self._require_source()
        if self.bgsave_in_progress:
            raise CommandError("Background save already in progress")
        self._bg_task = asyncio.ensure_future(self._bgsave())
        self._bg_task.add_done_callback(self._bgsave_done)
        return self._bg_task

    def _bgsave_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is not None:
            self.last_bgsave_status = "err"
            self._autosave_after = time.monotonic() + AUTOSAVE_RETRY_S
            if not task.cancelled():
                log.error("background snapshot failed: %s; the previous snapshot and WAL are unchanged",
                          task.exception())

    async def _bgsave(self) -> None:
        source = self._require_source()
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        begin, wal = self._snapshot_begin(True)
        target = self.layout.snapshot_path
        writer = SnapshotWriter(target, self.options.worker, begin)
        try:
            pending: list[Any] = []
            pending_bytes = 0
            slice_started = time.monotonic()
            for rtype, fields in source():
                # Copy on the loop thread (the store may change the rows right after we yield).
                parts = [bytes(p) if isinstance(p, memoryview) else p for p in frame(rtype, 0, fields)]
                pending.extend(parts)
                pending_bytes += sum(len(p) for p in parts)
                writer.records += 1
                if pending_bytes >= BGSAVE_CHUNK_BYTES:
                    await loop.run_in_executor(self._bg_pool, writer.write_parts, pending)
                    pending, pending_bytes = [], 0
                    slice_started = time.monotonic()
                elif time.monotonic() - slice_started > BGSAVE_SLICE_S:
                    await asyncio.sleep(0)
                    slice_started = time.monotonic()
            if pending:
                await loop.run_in_executor(self._bg_pool, writer.write_parts, pending)
            end_seq = wal.last_seq if wal is not None else begin
            await loop.run_in_executor(self._bg_pool, writer.commit, end_seq)
        except BaseException:
            writer.abort()
            raise
        self._saved(target, writer, begin, started, wal, True)

    def _drop_unreplayed_wal(self) -> list[str]:
        """``--appendonly no``: remove the WAL files an earlier ``--appendonly yes`` run left
        (recovery did not replay them; the new snapshot holds the live state)."""
        removed = []
        for path in self.layout.wal_files():
            path.unlink(missing_ok=True)
            removed.append(path.name)
        if removed:
            fsync_dir(self.layout.data_dir)
        return removed

    # -- reporting and shutdown ---------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Fields for INFO's ``# Persistence`` section."""
        wal = self.wal
        return {
            "aof_enabled": int(self.options.appendonly),
            "wal_bytes": self.wal_bytes,
            "appendfsync": self.options.appendfsync,
            "wal_max_bytes": self.options.wal_max_bytes,
            "wal_last_seq": wal.last_seq if wal else 0,
            "wal_synced_seq": wal.synced_seq if wal else 0,
            "wal_fsyncs": wal.fsyncs if wal else 0,
            "wal_fsync_seconds": round(wal.fsync_seconds, 3) if wal else 0.0,
            "wal_write_errors": wal.write_errors if wal else 0,
            "wal_last_write_status": "ok" if wal is None or wal.misconf is None else "err",
            "bgsave_in_progress": int(self.bgsave_in_progress),
            "last_save_time": self.last_save_unix,
            "last_bgsave_status": self.last_bgsave_status,
            "last_save_seconds": round(self.last_save_seconds, 3),
            "saves": self.saves,
        }

    def close(self) -> None:
        """Stop a running background snapshot (its temp file is removed) and close the WAL durably."""
        if self.bgsave_in_progress and self._bg_task is not None:
            log.warning("shutdown interrupts a background snapshot; the previous snapshot stays")
            self._bg_task.cancel()
        self._bg_pool.shutdown(wait=True)
        if self.wal is not None:
            self.wal.close()
            self.wal = None
