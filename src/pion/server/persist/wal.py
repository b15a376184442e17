"""The write-ahead log writer: append before reply, fsync by policy, batched group commit, MISCONF.

Roles (Redis ``aof.c`` discipline):

* ``append(rtype, fields) -> seq`` — called on the event-loop thread by the
  journal hooks, *before* the mutation is applied. The record is written with
  one ``os.writev`` (large row blobs go straight from the store's buffer, no
  copy) into the OS page cache. On failure (ENOSPC, EIO, EFBIG) the partial
  record is cut (``ftruncate`` to the last good offset) and ``CommandError(...,
  code="MISCONF")`` is raised, so the mutation is not applied and the client
  gets ``-MISCONF``. Every later append simply tries again; the first one that
  succeeds ends the MISCONF state. Reads never touch the WAL and keep working.
* ``flush_batch()`` — run by the network layer before each batch of replies (below).
* ``everysec``: a background thread fdatasyncs once a second when something
  was written. A failed background fsync puts the log in MISCONF until an
  fsync succeeds (retried on the next append).
* ``rotate()`` — closes the active file as a segment (fsynced first) and opens
  a fresh one; a snapshot that begins at that moment makes the segment obsolete.

Batched mode (``enable_batching()``, what the server uses; like Redis's ``aof_buf``; an
earlier per-command path — each write's reply awaiting a helper-thread group fsync — was
measured against it and removed, see docs/operations.md):
records under ``BATCH_MAX_RECORD`` bytes with no blob of 4 KB or more are copied into an in-memory buffer and the
mutation is applied at once; ``flush_batch()`` — the server's ``before_reply`` hook,
run once per event-loop batch before any reply of the batch reaches a socket — writes
the whole buffer with one ``write`` and, under ``always``, fdatasyncs once for the
batch (group commit: one fsync covers every client served in that loop iteration).
Larger records (row blobs of V.STOREBATCH) are still written synchronously before
they are applied (after the buffer, to keep the order), so a failure refuses them
with nothing changed and their bytes are never copied into the buffer.

A failed batch write is different from a failed synchronous append: the buffered
mutations are already in memory. The partial bytes are cut, the records *stay in the
buffer* (the WAL must keep matching memory: dropping them would make later records
replay against missing state) and ``flush_batch`` raises ``CommandError(MISCONF)``;
the network layer then turns the replies of that batch's write commands into
``-MISCONF`` errors, so none of them is acknowledged. Every later append first retries
the buffer and is refused (not applied) while that fails; once the disk takes writes
again the buffered records reach the WAL in order. So a write answered ``-MISCONF``
from a failed batch was applied in memory and becomes durable when the disk recovers
(Redis behaves the same way with its AOF buffer under ``everysec``; under ``always``
Redis exits instead). What never happens: a ``+OK`` for a record not written (and,
under ``always``, not fsynced).

Threads: appends, batch writes, ``always`` fsyncs, rotation and the MISCONF bookkeeping
happen on the loop thread; only the ``everysec`` fdatasync runs in a helper thread.
``_fd_lock`` keeps rotation from closing a descriptor that thread is syncing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Mapping
from typing import Any, Final, Literal

from pion.common.errors import CommandError
from pion.server.errors import wal_misconf
from pion.server.persist.files import DataLayout, fsync_dir, write_all
from pion.server.persist.records import RecordType, append_small, frame, frame_payload, frame_payload_into

FsyncPolicy = Literal["always", "everysec", "no"]
FSYNC_POLICIES: tuple[str, ...] = ("always", "everysec", "no")
_os_write: Final = os.write
BATCH_MAX_RECORD: Final = 16 * 1024  # payloads up to this size, without a >= 4 KB blob, are buffered
BATCH_MAX_BYTES: Final = 1024 * 1024  # a buffer past this is written at once (still before any reply)
# Upper bounds (seconds) of the fsync latency histogram (pion_wal_fsync_duration_seconds).
FSYNC_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
log = logging.getLogger("pion.persist")


class WalWriter:
    """Appends records to ``pion.vstore.<w>.wal`` and makes them durable by policy."""

    def __init__(self, layout: DataLayout, policy: FsyncPolicy = "everysec", next_seq: int = 1,
                 active_first_seq: int | None = None) -> None:
        if policy not in FSYNC_POLICIES:
            raise ValueError(f"appendfsync must be one of {', '.join(FSYNC_POLICIES)}, got {policy!r}")
        self.layout = layout
        self.policy = policy
        self._fd_lock = threading.Lock()
        self._fd = self._open_active()
        self._offset = os.fstat(self._fd).st_size
        self._segment_bytes = sum(p.stat().st_size for p in layout.segments())
        self.last_seq = next_seq - 1  # last record appended (batched mode: maybe still buffered)
        self.written_seq = self.last_seq  # last record written to the file
        self.batching = False
        self._buf = bytearray()
        # Seq of the first record in the active file (names the segment it becomes).
        self.active_first_seq = next_seq if active_first_seq is None else active_first_seq
        self.synced_seq = self.last_seq
        self.misconf: str | None = None  # why writes are refused, or None
        self._sync_failed: str | None = None
        self._last_error_log = 0.0
        self.write_errors = 0
        self.fsyncs = 0
        self.fsync_seconds = 0.0
        self.fsync_buckets = [0] * (len(FSYNC_BUCKETS_S) + 1)  # counts per FSYNC_BUCKETS_S bound, + the rest
        self._stop = threading.Event()
        self._everysec: threading.Thread | None = None
        if policy == "everysec":
            self._everysec = threading.Thread(target=self._everysec_loop, name="pion-wal-everysec", daemon=True)
            self._everysec.start()

    # -- files -----------------------------------------------------------------------------

    def _open_active(self) -> int:
        path = self.layout.wal_path
        existed = path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not existed:
            fsync_dir(self.layout.data_dir)
        return fd

    @property
    def wal_bytes(self) -> int:
        """Bytes of the active WAL (written or buffered) and segments not yet made obsolete."""
        return self._offset + len(self._buf) + self._segment_bytes

    @property
    def active_bytes(self) -> int:
        return self._offset

    # -- appending ---------------------------------------------------------------------------

    def enable_batching(self) -> None:
        """Buffer small records until ``flush_batch`` (the server calls it before each reply batch)."""
        self.batching = True

    def append(self, rtype: RecordType, fields: Mapping[str, Any] | bytes) -> int:
        """Log one record; returns its sequence number. Raises CommandError(MISCONF) on failure.

        ``fields`` is the field map, or the payload already encoded (``bytes``; a record
        class's ``small_payload``). Unbatched, or for a large record: written now (after any
        buffered records). Batched and small: copied into the buffer; ``flush_batch`` writes it.
        """
        if self._sync_failed is not None:
            self._retry_sync()
        if self._buf and self.misconf is not None:
            self.flush_batch()  # retry what failed before; refuse this record while that fails
        seq = self.last_seq + 1
        if self.batching:
            # A payload that is one small buffer (no zero-copy blob of 4 KB or more) is
            # framed straight into the buffer; anything else comes back as frame()'s parts.
            buf = self._buf
            if type(fields) is bytes:
                if len(fields) <= BATCH_MAX_RECORD:
                    frame_payload_into(buf, rtype, seq, fields)
                    small = None
                else:
                    small = frame_payload(rtype, seq, fields)
            else:
                small = append_small(buf, rtype, seq, fields, BATCH_MAX_RECORD)  # type: ignore[arg-type]
            if small is None:
                self.last_seq = seq
                if len(buf) > BATCH_MAX_BYTES:
                    self.flush_batch()
                return seq
            parts = small
            if buf:
                self.flush_batch()
        elif type(fields) is bytes:
            parts = frame_payload(rtype, seq, fields)
        else:
            parts = frame(rtype, seq, fields)  # type: ignore[arg-type]
        good = self._offset
        try:
            written = write_all(self._fd, parts)
        except OSError as e:
            self._cut(good)
            self._fail(f"{e.strerror or e}")
            raise self._misconf_error(e) from e
        self._offset = good + written
        self.last_seq = self.written_seq = seq
        self._write_ok()
        return seq

    def flush_batch(self) -> None:
        """Write the buffered records (one write); under ``always`` also fdatasync.

        Raises CommandError(MISCONF) when the write or the fsync fails; the buffered
        records are then kept (cut from the file, retried by the next call or append).
        """
        buf = self._buf
        if buf:
            good = self._offset
            try:
                # One write() for the batch; ``write_all`` (a Python-level loop over a list of
                # buffers, ~1 µs) only finishes a short write. Once per reply batch: at -P 1 about
                # once per SET (issue 13).
                written = _os_write(self._fd, buf)
                if written < len(buf):
                    written += write_all(self._fd, [bytes(buf[written:])])
            except OSError as e:
                self._cut(good)
                self._fail(f"{e.strerror or e}")
                raise self._misconf_error(e) from e
            self._offset = good + written
            self.written_seq = self.last_seq
            buf.clear()
            self._write_ok()
        if self.policy == "always" and self.synced_seq < self.written_seq:
            try:
                self.sync_now()
            except OSError as e:
                self._sync_failed = str(e)
                self._fail(f"fsync failed: {e.strerror or e}")
                raise wal_misconf(self.layout.wal_path.name, f"fsync failed: {e.strerror or e}") from e
            self._sync_failed = None
            self._write_ok()

    @property
    def batch_pending(self) -> bool:
        """True when ``flush_batch`` has something to do before replies may go out."""
        return bool(self._buf) or (self.policy == "always" and self.synced_seq < self.last_seq)

    def _misconf_error(self, e: OSError) -> CommandError:
        return wal_misconf(self.layout.wal_path.name, f"{e.strerror or e}")

    def _write_ok(self) -> None:
        if self.misconf is not None and self._sync_failed is None:
            log.warning("WAL writes succeed again; leaving the MISCONF state")
            self.misconf = None

    def _cut(self, good: int) -> None:
        """Remove a partly written record so the log ends on a record boundary."""
        try:
            os.ftruncate(self._fd, good)
        except OSError as e:  # the next append writes after the junk; recovery then refuses loudly
            log.error("could not cut the partial WAL record at offset %d: %s", good, e)

    def _fail(self, reason: str) -> None:
        self.write_errors += 1
        first = self.misconf is None
        self.misconf = reason
        now = time.monotonic()
        if first or now - self._last_error_log > 5.0:
            self._last_error_log = now
            log.error("error writing to the WAL %s: %s; refusing writes (-MISCONF) until a write succeeds",
                      self.layout.wal_path, reason)

    # -- durability --------------------------------------------------------------------------

    def _sync_fd(self) -> None:
        """fdatasync the active file (helper thread or loop thread)."""
        started = time.monotonic()
        with self._fd_lock:
            os.fdatasync(self._fd)
        elapsed = time.monotonic() - started
        self.fsyncs += 1
        self.fsync_seconds += elapsed
        self.fsync_buckets[bisect_left(FSYNC_BUCKETS_S, elapsed)] += 1

    def _retry_sync(self) -> None:
        try:
            self._sync_fd()
        except OSError as e:
            self._fail(f"fsync failed: {e.strerror or e}")
            raise wal_misconf(self.layout.wal_path.name, f"fsync failed: {e.strerror or e}") from e
        self._sync_failed = None
        self.synced_seq = self.written_seq

    def _everysec_loop(self) -> None:
        while not self._stop.wait(1.0):
            target = self.written_seq
            if target <= self.synced_seq:
                continue
            try:
                self._sync_fd()
            except (OSError, ValueError) as e:
                self._sync_failed = str(e)
                self.misconf = f"background fsync failed: {e}"
                log.error("background fsync of %s failed: %s", self.layout.wal_path, e)
                continue
            self.synced_seq = max(self.synced_seq, target)

    def sync_now(self) -> None:
        """fdatasync on the calling thread (shutdown, tests, before rotation; writes the buffer first)."""
        if self._buf:
            self.flush_batch()
        target = self.written_seq
        self._sync_fd()
        self.synced_seq = max(self.synced_seq, target)

    # -- segments ----------------------------------------------------------------------------

    def rotate(self) -> int:
        """Close the active WAL as a segment and start a new one; returns the last seq before.

        Records up to the returned seq are in segments; a snapshot that starts now and
        completes makes them obsolete (``drop_segments_upto``). An empty active WAL is not
        rotated. Raises OSError (nothing changed) if the fsync or rename fails.
        """
        if self._buf:
            try:
                self.flush_batch()
            except CommandError as e:
                raise OSError(5, e.message) from e
        last = self.last_seq
        if self._offset == 0:
            return last
        self.sync_now()
        segment = self.layout.segment_path(self.active_first_seq)
        with self._fd_lock:
            os.rename(self.layout.wal_path, segment)
            old_fd = self._fd
            try:
                self._fd = self._open_active()
            except OSError:
                os.rename(segment, self.layout.wal_path)
                raise
            os.close(old_fd)
            fsync_dir(self.layout.data_dir)
        self._segment_bytes += self._offset
        self._offset = 0
        self.active_first_seq = last + 1
        return last

    def drop_segments_upto(self, seq: int) -> list[str]:
        """Delete closed segments whose records are all <= ``seq``; returns their names."""
        segments = self.layout.segments()
        firsts = [int(p.name.rsplit(".", 1)[1]) for p in segments] + [self.active_first_seq]
        removed = []
        for i, path in enumerate(segments):
            if firsts[i + 1] - 1 <= seq:
                size = path.stat().st_size
                path.unlink()
                self._segment_bytes -= size
                removed.append(path.name)
        if removed:
            fsync_dir(self.layout.data_dir)
        return removed

    def close(self) -> None:
        """Stop the fsync thread, fsync what was written (under every policy: a clean
        shutdown loses nothing) and close the file."""
        self._stop.set()
        if self._everysec is not None:
            self._everysec.join(timeout=5.0)
        try:
            if self._buf:
                self.flush_batch()
            if self.last_seq > self.synced_seq:
                self.sync_now()
        except (OSError, CommandError) as e:
            log.error("fsync of %s at shutdown failed: %s", self.layout.wal_path, e)
        with self._fd_lock:
            os.close(self._fd)
            self._fd = -1

