"""Data-file names under ``--dir`` and the few checked system calls every writer uses.

One worker owns (``<w>`` is the worker number)::

    pion.vstore.<w>                    the snapshot recovery loads (KV.PREFIX.SAVE / SAVE / BGSAVE)
    pion.vstore.<w>.tmp                a snapshot being written (removed at start-up if left over)
    pion.vstore.<w>.wal                the active write-ahead log; records are appended here
    pion.vstore.<w>.wal.<first_seq>    an older WAL segment, closed when a snapshot began
                                       (20-digit seq; deleted once that snapshot is in place)

Writes go through ``write_all``: a short write is continued, an error raises
``OSError`` with the errno (ENOSPC, EIO, EFBIG) so the caller can cut what it wrote.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IOV_MAX = 1024
_SEGMENT_RE = re.compile(r"^pion\.vstore\.(\d+)\.wal\.(\d{20})$")


@dataclass(frozen=True, slots=True)
class DataLayout:
    """Where one worker's snapshot and WAL files live."""

    data_dir: Path
    worker: int = 0

    @property
    def snapshot_path(self) -> Path:
        return self.data_dir / f"pion.vstore.{self.worker}"

    @property
    def wal_path(self) -> Path:
        return self.data_dir / f"pion.vstore.{self.worker}.wal"

    def segment_path(self, first_seq: int) -> Path:
        return self.data_dir / f"pion.vstore.{self.worker}.wal.{first_seq:020d}"

    def segments(self) -> list[Path]:
        """Closed WAL segments in replay order (oldest first)."""
        found = []
        if self.data_dir.is_dir():
            for entry in self.data_dir.iterdir():
                match = _SEGMENT_RE.match(entry.name)
                if match and int(match.group(1)) == self.worker:
                    found.append((int(match.group(2)), entry))
        return [path for _, path in sorted(found)]

    def wal_files(self) -> list[Path]:
        """Every WAL file to replay, oldest first; the active one last if it exists."""
        files = self.segments()
        if self.wal_path.exists():
            files.append(self.wal_path)
        return files


def _nbytes(part: Any) -> int:
    return part.nbytes if isinstance(part, memoryview) else len(part)


def write_all(fd: int, parts: list[Any]) -> int:
    """Write every buffer in order with ``os.writev``, continuing short writes.

    Returns the byte count. Raises OSError on the first failing call (bytes before
    it may already be in the file: the caller truncates). A zero-byte write is
    reported as ENOSPC rather than looping forever.
    """
    total = 0
    pending = [memoryview(p).cast("B") if isinstance(p, memoryview) else p for p in parts]
    pending = [p for p in pending if _nbytes(p)]
    while pending:
        batch = pending[:IOV_MAX]
        written = os.writev(fd, batch)
        if written <= 0:
            raise OSError(28, "No space left on device (zero-byte write)")
        total += written
        # Drop fully written buffers; keep the unwritten tail of a partly written one.
        while written:
            size = _nbytes(pending[0])
            if written >= size:
                written -= size
                pending.pop(0)
            else:
                pending[0] = memoryview(pending[0])[written:]
                written = 0
    return total


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or create inside it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def full_sync(fd: int) -> None:
    """Flush file data to stable storage (F_FULLFSYNC where the OS has it, as on macOS)."""
    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None:
        fcntl.fcntl(fd, full)
    else:
        os.fsync(fd)
