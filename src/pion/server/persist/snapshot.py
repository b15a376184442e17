"""Snapshots: the whole store of one worker written as one checksummed, versioned file.

File layout (little-endian)::

    offset size field
    0      8    magic        b"PIONSNAP"
    8      4    version      2 (SNAPSHOT_VERSION; 1 = before the semantic cache, still read)
    12     4    worker       worker number
    16     8    begin_seq    every WAL record with seq <= begin_seq is in this snapshot
    24     8    created_ms   unix time in ms
    32     4    header_crc   crc32c of bytes 0..31
    36     ...  records      framed exactly like WAL records (see records.py), seq 0:
                             V.CREATE / KV.PREFIX.REGISTER / V.STOREBATCH (each layer in
                             chunks of at most 64 MiB of rows) / SET ... /
                             SEMANTIC.SET (version 2: one per live semantic-cache entry)
    end    ...  SNAPSHOT.END records i (count before it), begin_seq i, end_seq i

Worked example: an empty store saved at seq 5 is the 36-byte header
(``50 49 4f 4e 53 4e 41 50 | 02 00 00 00 | 00 00 00 00 | 05 00 .. | <ms> | <crc>``)
followed by one SNAPSHOT.END record (records=0, begin_seq=5, end_seq=5).

Writing is streaming: records go to ``<path>.tmp`` as the store is walked, so no
second copy of the store is built. Every write is checked; then fsync, rename
over ``<path>``, fsync the directory. Any failure removes the temp file and
leaves the previous snapshot untouched.

Consistency. A foreground SAVE holds the event loop, so the snapshot is exact
at ``begin_seq == end_seq``. A BGSAVE walks the store a slice at a time on the
loop thread and writes from a helper thread, while clients keep writing: the
snapshot is *fuzzy* — each session is read at some moment between
``begin_seq`` and ``end_seq``. Recovery therefore replays every WAL record with
seq > begin_seq on top of it; records up to ``end_seq`` may already be
reflected and are applied leniently (a failure there is expected and ignored).
Every logged mutation is an overwrite of named rows/keys, a create, or a
drop/evict, so replaying them in order on any such intermediate state converges
to the state at the end of the log.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pion.server.persist.files import fsync_dir, full_sync, write_all
from pion.server.persist.reader import Record, RecordReader
from pion.server.persist.records import RecordType, crc, frame

SNAP_MAGIC = b"PIONSNAP"
# 2 added SEMANTIC.SET records; a version-1 file has none and loads unchanged. The bump
# makes an older build refuse a snapshot whose semantic entries it would silently drop.
SNAPSHOT_VERSION = 2
_SNAP_HEADER = struct.Struct("<8sIIQQ")
SNAP_HEADER_SIZE = _SNAP_HEADER.size + 4  # 36


class SnapshotError(Exception):
    """A snapshot could not be written or read; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What a snapshot file's header and END record say."""

    worker: int
    begin_seq: int
    end_seq: int
    created_ms: int
    records: int


class SnapshotWriter:
    """Streams records into ``<path>.tmp``; ``commit`` makes it the snapshot, ``abort`` removes it."""

    def __init__(self, path: Path, worker: int, begin_seq: int) -> None:
        self.path = path
        self.tmp_path = path.with_name(path.name + ".tmp")
        self.begin_seq = begin_seq
        self.records = 0
        self.bytes_written = 0
        self._fd = os.open(self.tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            head = _SNAP_HEADER.pack(SNAP_MAGIC, SNAPSHOT_VERSION, worker, begin_seq, int(time.time() * 1000))
            self.write_parts([head, struct.pack("<I", crc(head))])
        except BaseException:
            self.abort()
            raise

    def write_parts(self, parts: list[Any]) -> None:
        """Write already-framed bytes (checked; raises OSError)."""
        self.bytes_written += write_all(self._fd, parts)

    def add(self, rtype: RecordType, fields: Mapping[str, Any]) -> None:
        """Frame and write one record (zero-copy for large blobs)."""
        self.write_parts(frame(rtype, 0, fields))
        self.records += 1

    def commit(self, end_seq: int) -> None:
        """Write the END record, fsync, rename into place, fsync the directory."""
        try:
            self.write_parts(frame(RecordType.SNAPSHOT_END, 0, {
                "records": self.records, "begin_seq": self.begin_seq, "end_seq": end_seq}))
            full_sync(self._fd)
            os.close(self._fd)
            self._fd = -1
            os.replace(self.tmp_path, self.path)
            fsync_dir(self.path.parent)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Close and delete the temp file; the previous snapshot stays."""
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1
        try:
            self.tmp_path.unlink()
        except FileNotFoundError:
            pass


def read_snapshot_header(path: Path) -> tuple[int, int, int]:
    """(worker, begin_seq, created_ms) from a snapshot header; SnapshotError if invalid."""
    with open(path, "rb") as f:
        head = f.read(SNAP_HEADER_SIZE)
    if len(head) < SNAP_HEADER_SIZE:
        raise SnapshotError(f"{path}: offset 0: file too short for a snapshot header ({len(head)} bytes)")
    magic, version, worker, begin_seq, created_ms = _SNAP_HEADER.unpack(head[:32])
    if magic != SNAP_MAGIC:
        raise SnapshotError(f"{path}: offset 0: not a Pion snapshot (magic {magic!r})")
    if crc(head[:32]) != struct.unpack("<I", head[32:36])[0]:
        raise SnapshotError(f"{path}: offset 0: snapshot header checksum mismatch")
    if version > SNAPSHOT_VERSION:
        raise SnapshotError(f"{path}: snapshot version {version} is newer than this build's {SNAPSHOT_VERSION}")
    return worker, begin_seq, created_ms


class SnapshotReader:
    """Iterates a snapshot's data records; afterwards ``info`` holds the verified END record.

    Raises SnapshotError (naming the file and offset) on any damage or a missing END:
    a snapshot was renamed into place only after it was complete, so there is no
    torn tail to forgive.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.worker, self.begin_seq, self.created_ms = read_snapshot_header(path)
        self.info: SnapshotInfo | None = None
        self._reader = RecordReader(path, SNAP_HEADER_SIZE)

    @property
    def size(self) -> int:
        return self._reader.size

    @property
    def offset(self) -> int:
        return self._reader.offset

    def __iter__(self) -> Iterator[Record]:
        count = 0
        for record in self._reader:
            if record.rtype == RecordType.SNAPSHOT_END:
                f = record.fields
                if f.get("records") != count or record.offset + record.size != self._reader.size:
                    raise SnapshotError(f"{self.path}: offset {record.offset}: END record does not match "
                                        f"the file ({count} records read, END says {f.get('records')})")
                self.info = SnapshotInfo(self.worker, int(f["begin_seq"]), int(f["end_seq"]),
                                         self.created_ms, count)
                return
            count += 1
            yield record
        end = self._reader.end
        offset = end.offset if end is not None else self._reader.offset
        reason = end.reason if end is not None and end.reason else "no END record"
        raise SnapshotError(f"{self.path}: offset {offset}: snapshot is damaged or incomplete: {reason}")
