"""Sequential reading of framed records from a WAL or snapshot file.

The reader never guesses: it yields verified records and, when it stops, says
why in ``end`` — ``clean`` (end of file on a record boundary), ``torn`` (the
file ends inside a record, or only zero bytes follow: what a crash mid-append
leaves) or ``corrupt`` (a bad checksum or bad header with more data after it:
damage that a crash cannot explain). Whether a torn end may be cut is the
caller's decision (only in the last WAL file).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from pion.server.persist.records import (
    HEADER_SIZE,
    TRAILER_SIZE,
    HeaderError,
    RecordFormatError,
    check_payload,
    decode_fields,
    parse_header,
)

EndKind = Literal["clean", "torn", "corrupt"]
_READ_BUFFER = 1 << 20


@dataclass(frozen=True, slots=True)
class Record:
    """One verified record: its type, sequence number, fields and where it lies in the file.

    Blob fields are memoryviews into the reader's buffer, valid until the next record
    is read (like the V-store journal's rows): copy what you keep.
    """

    rtype: int
    seq: int
    fields: dict[str, Any]
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class ScanEnd:
    """Why reading stopped: ``offset`` is the first byte not covered by a good record."""

    kind: EndKind
    offset: int
    reason: str = ""


class RecordReader:
    """Iterate the records of one file from ``start``; afterwards ``end`` tells why it stopped."""

    def __init__(self, path: Path, start: int = 0) -> None:
        self.path = path
        self.start = start
        self.size = os.stat(path).st_size
        self.end: ScanEnd | None = None
        self.offset = start

    def __iter__(self) -> Iterator[Record]:
        with open(self.path, "rb", buffering=_READ_BUFFER) as f:
            f.seek(self.start)
            yield from self._scan(f)

    def _stop(self, kind: EndKind, reason: str) -> None:
        self.end = ScanEnd(kind, self.offset, reason)

    def _scan(self, f: BinaryIO) -> Iterator[Record]:
        size = self.size
        head = bytearray(HEADER_SIZE)
        # One reused payload buffer: no fresh (page-faulting) allocation per record.
        buf = bytearray(1 << 16)
        while True:
            off = self.offset
            if off == size:
                self._stop("clean", "")
                return
            got = _read_into(f, memoryview(head))
            if got < HEADER_SIZE:
                self._stop("torn", f"file ends inside a record header ({got} of {HEADER_SIZE} bytes)")
                return
            try:
                header = parse_header(head)
            except HeaderError as e:
                kind: EndKind = "torn" if _only_zeros(f, off + HEADER_SIZE, size, bytes(head)) else "corrupt"
                self._stop(kind, str(e) + (" (only zero bytes follow)" if kind == "torn" else ""))
                return
            end = off + header.record_size
            if end > size:
                self._stop("torn", f"file ends inside a record ({size - off} of {header.record_size} bytes)")
                return
            need = header.length + TRAILER_SIZE
            if len(buf) < need:
                buf = bytearray(max(need, 2 * len(buf)))  # a new buffer: views of the old stay valid
            body = memoryview(buf)[:need]
            if _read_into(f, body) < need:
                self._stop("torn", "file ends inside a record (it shrank while being read)")
                return
            payload = body[: header.length]
            if not check_payload(payload, body[header.length:]):
                kind = "torn" if end == size else "corrupt"
                self._stop(kind, "payload checksum mismatch" + (" in the last record" if kind == "torn" else ""))
                return
            try:
                fields = decode_fields(payload)
            except (RecordFormatError, UnicodeDecodeError) as e:
                self._stop("corrupt", f"malformed payload with a valid checksum: {e}")
                return
            yield Record(header.rtype, header.seq, fields, off, header.record_size)
            self.offset = end


def _read_into(f: BinaryIO, view: memoryview) -> int:
    """Fill ``view`` from ``f``; returns the bytes read (fewer only at end of file)."""
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


def _only_zeros(f: BinaryIO, pos: int, size: int, head: bytes) -> bool:
    """True when ``head`` and everything from ``pos`` to the end of the file are zero bytes."""
    if head.strip(b"\0"):
        return False
    f.seek(pos)
    remaining = size - pos
    while remaining > 0:
        chunk = f.read(min(remaining, _READ_BUFFER))
        if not chunk:
            break
        if chunk.strip(b"\0"):
            return False
        remaining -= len(chunk)
    return True
