"""Find where one RESP2/RESP3 reply ends in a byte buffer, without decoding it.

A worker that forwards a command to another worker (``pion-server -w N``: keyspace commands
run on worker 0) relays the reply bytes exactly as they came, so RESP3 types (maps, sets,
doubles, verbatim strings, attributes) reach the client unchanged. Sans-I/O: bytes in,
an offset out; the caller reads more when the reply is not complete yet.

Example: ``reply_end(b"*2\\r\\n$1\\r\\na\\r\\n:5\\r\\n+OK", 0)`` is 15 (the array ends before
``+OK``); ``reply_end(b"$5\\r\\nab", 0)`` is None (the bulk string has not all arrived).
"""

from __future__ import annotations

_LINE_TYPES = frozenset(b"+-:_,#(")  # one line: simple, error, integer, null, double, bool, big number
_BULK_TYPES = frozenset(b"$!=")  # length line + payload: bulk, bulk error, verbatim
_AGGREGATE_TYPES = frozenset(b"*~>")  # n elements: array, set, push
_PAIR_TYPES = frozenset(b"%|")  # n key/value pairs: map, attribute


class ReplyFormatError(ValueError):
    """The bytes are not a RESP reply (a peer that speaks something else)."""


def reply_end(buf: bytes | bytearray, start: int) -> int | None:
    """The offset just past the reply that begins at ``start``; None when it is incomplete."""
    pending = 1  # replies still to skip
    pos = start
    size = len(buf)
    while pending:
        if pos >= size:
            return None
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            return None
        kind = buf[pos]
        pending -= 1
        if kind in _LINE_TYPES:
            pos = line_end + 2
            continue
        try:
            count = int(buf[pos + 1: line_end])
        except ValueError:
            raise ReplyFormatError(f"bad length in reply header {bytes(buf[pos:line_end])[:40]!r}") from None
        if kind in _BULK_TYPES:
            if count < 0:
                pos = line_end + 2
                continue
            end = line_end + 2 + count + 2
            if end > size:
                return None
            pos = end
        elif kind in _AGGREGATE_TYPES:
            pending += max(count, 0)
            pos = line_end + 2
        elif kind in _PAIR_TYPES:
            pending += 2 * count
            if kind == ord("|"):
                pending += 1  # an attribute precedes the reply it describes
            pos = line_end + 2
        else:
            raise ReplyFormatError(f"unknown reply type byte {chr(kind)!r}")
    return pos
