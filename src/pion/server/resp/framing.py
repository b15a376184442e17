"""Request framing ahead of hiredis: where each request starts and ends, and its limits.

hiredis parses RESP in C, but three things it cannot do for a server:
  * say whether a read ended *between* two requests or *inside* one — once it has consumed
    the complete elements of a partial array, ``has_data()`` is False in both cases, so
    "the next read starts a new request" cannot be decided from its state (data bytes
    were once run as inline commands that way);
  * refuse a length at its header: it allocates a list of the declared element count as
    soon as it sees ``*N`` and waits for a declared bulk payload of any size;
  * apply Redis's tighter limits to a client that has not authenticated yet.

``RequestFramer`` walks the byte stream with the rules of Redis's ``processMultibulkBuffer``
and ``processInlineBuffer`` and hands hiredis only validated, canonical multibulk frames:

  * ``*N`` with N > 1,048,576 (10 before AUTH) or not a number → ``invalid multibulk
    length`` (``unauthenticated multibulk length``); N ≤ 0 is skipped, like Redis;
  * an element that does not start with ``$`` → ``expected '$', got 'x'``;
  * ``$L`` with L < 0 or above ``--proto-max-bulk-len`` (16 KB before AUTH) → ``invalid
    bulk length`` (``unauthenticated bulk length``), decided at the header;
  * a header line or an inline line longer than 64 KB without its newline → ``too big
    mbulk count string`` / ``too big bulk count string`` / ``too big inline request``;
  * inline lines are split like ``sdssplitargs`` and handed on as word lists, so inline
    and multibulk requests can follow each other anywhere in a pipeline;
  * an array declared with more than ``HOLD_ARRAYS_OVER`` elements is held here until it
    is complete, then handed on as its word list (hiredis itself is capped at that size,
    see ``hiredis_limits``), so memory follows the bytes received, never a declared length.

Example: the stream ``*3\\r\\n$3\\r\\nSET\\r\\n$1\\r\\nk\\r\\n`` + ``$8\\r\\nFLUSHALL\\r\\n``
split after ``k\\r\\n`` leaves the framer inside element 3 of 3 (``at_boundary`` False),
so the second read continues that request instead of starting an inline command.

The network layer only runs it when it must (``net.py``): a read that starts on a request
boundary, begins with ``*`` and ends with a newline goes to hiredis directly; the framer
re-reads it afterwards only if it ended mid-request, and takes over from the first request
hiredis refuses (an inline line, a large or negative array header).
"""

from __future__ import annotations

import re
from typing import Final

from pion.server.resp.inline import MAX_INLINE_BYTES as _MAX_INLINE_BYTES, InlineError, split_inline

MAX_INLINE_BYTES: Final = _MAX_INLINE_BYTES  # (a static here: read per line)

MAX_MULTIBULK_LEN: Final = 1024 * 1024
MAX_UNAUTH_MULTIBULK_LEN: Final = 10
MAX_UNAUTH_BULK_LEN: Final = 16 * 1024
HOLD_ARRAYS_OVER: Final = 1024  # Redis 7 also stops pre-allocating argv beyond 1024 arguments

# Where hiredis cannot be capped (another build, see hiredis_limits): a read that may hold an
# array header the fast path must not hand to hiredis, ``*`` then four digits or a minus.
LARGE_ARRAY_HEADER = re.compile(rb"\*(?:\d{4}|-)")

MAX_BULK_SCAN = 2**63 - 1  # a probe that only locates frames applies no size limit
_INTEGER: Final = re.compile(rb"-?[1-9][0-9]{0,18}|0")  # Redis's string2ll: no sign, spaces, zeros

# The framer's states (Final: inlined constants in compiled code, not module-dict lookups).
_START: Final = 0
_ARRAY_LINE: Final = 1
_BULK_LINE: Final = 2
_BULK_BODY: Final = 3
_INLINE: Final = 4


class FramedRead:
    """What one ``feed`` produced: bytes for hiredis, in order, and how it ended.

    A plain class, not a dataclass: mypyc built the dataclass through its Python-level
    ``__init__`` (``default_factory``), once per framed read (issue 13)."""

    def __init__(self) -> None:
        # Frame bytes for hiredis, in order; an inline request comes as its list of words (the
        # network layer runs it directly when nothing is queued before it, else encodes it).
        self.pieces: list[bytes | memoryview | list[bytes]] = []
        self.error: str | None = None  # Redis's text after ``Protocol error: ``; the client closes
        self.rest: bytes = b""  # unread remainder (``one_request`` mode stops after one request)


def _words_of(frame: bytes) -> list[bytes]:
    """The arguments of one complete, already checked multibulk frame (a held array)."""
    words: list[bytes] = []
    pos = frame.index(b"\r\n") + 2
    while pos < len(frame):
        end = frame.index(b"\r\n", pos)
        length = int(frame[pos + 1:end])
        words.append(frame[end + 2:end + 2 + length])
        pos = end + 4 + length
    return words


def encode_words(words: list[bytes]) -> bytes:
    """An inline request's words as the multibulk frame hiredis would have parsed."""
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%b\r\n" % (len(w), w) for w in words)


class RequestFramer:
    """The RESP request stream of one connection, tracked across reads."""

    def __init__(self, max_bulk_len: int) -> None:
        self.max_bulk_len = max_bulk_len
        self.state = _START
        self.line = bytearray()  # a header or inline line carried over from earlier reads
        self.elements_left = 0
        self.body_left = 0  # payload bytes plus CRLF still to come
        self.hold: bytearray | None = None  # a large array kept until complete

    @property
    def at_boundary(self) -> bool:
        """True when the bytes seen so far end exactly after a whole request."""
        return self.state == _START

    def feed(self, data: bytes, authenticated: bool, one_request: bool = False) -> FramedRead:
        """Frame ``data`` (continuing the stream); see the module docstring for the rules.

        With ``one_request`` the framer stops after the first complete request and returns
        the unread bytes in ``rest``, so limits that depend on AUTH apply per request.
        """
        out = FramedRead()
        pieces = out.pieces
        view = memoryview(data)
        n = len(data)
        i = 0
        emit_from = 0  # start of the run of bytes passed through unchanged

        def emit(end: int) -> None:
            if end > emit_from:
                if self.hold is not None:
                    self.hold += view[emit_from:end]
                else:
                    pieces.append(view[emit_from:end])

        max_array = MAX_MULTIBULK_LEN if authenticated else MAX_UNAUTH_MULTIBULK_LEN
        max_bulk = self.max_bulk_len if authenticated else min(self.max_bulk_len,
                                                               MAX_UNAUTH_BULK_LEN)
        while i < n:
            state = self.state
            if state == _BULK_BODY:
                take = min(self.body_left, n - i)
                i += take
                self.body_left -= take
                if self.body_left:
                    break
                self.elements_left -= 1
                if self.elements_left:
                    self.state = _BULK_LINE
                    continue
                self.state = _START
                if self.hold is not None:
                    emit(i)
                    pieces.append(_words_of(bytes(self.hold)))
                    self.hold = None
                    emit_from = i
                if one_request:
                    break
                continue
            if state == _START:
                self.state = state = _ARRAY_LINE if data[i] == 42 else _INLINE
            # A line-terminated element: an array header, a bulk header or an inline line.
            if state == _BULK_LINE and not self.line and data[i] != 36:
                emit(i)
                out.error = f"expected '$', got '{chr(data[i])}'"
                return out
            newline = data.find(b"\n", i)
            if newline < 0:
                emit(i)
                self.line += view[i:]
                if len(self.line) > MAX_INLINE_BYTES:
                    out.error = ("too big inline request" if state == _INLINE else
                                 "too big mbulk count string" if state == _ARRAY_LINE else
                                 "too big bulk count string")
                return out
            start = i
            if state == _INLINE:
                # The line's words without its CR LF, sliced once (a pipeline of inline
                # PINGs runs this per request).
                if self.line:  # the line began in an earlier read
                    text = bytes(self.line) + data[i:newline]
                    self.line.clear()
                    if text.endswith(b"\r"):
                        text = text[:-1]
                else:
                    text = data[i:newline - 1 if newline > i and data[newline - 1] == 13
                                else newline]
                i = newline + 1
                if start > emit_from:
                    emit(start)
                emit_from = i
                try:
                    words = split_inline(text)
                except InlineError as exc:
                    out.error = str(exc)
                    return out
                self.state = _START
                if words:
                    pieces.append(words)
                    if one_request:
                        break
                continue
            if self.line:  # the line began in an earlier read: it was not emitted yet
                line = bytes(self.line) + data[i:newline + 1]
                self.line.clear()
                split = True
            else:
                line = data[i:newline + 1]
                split = False
            i = newline + 1
            number = line[1:-2] if line.endswith(b"\r\n") else b"x"
            valid = _INTEGER.fullmatch(number) is not None
            if state == _ARRAY_LINE:
                count = int(number) if valid else 0
                if not valid or count > MAX_MULTIBULK_LEN:
                    emit(start)
                    out.error = "invalid multibulk length"
                    return out
                if count > max_array:
                    emit(start)
                    out.error = "unauthenticated multibulk length"
                    return out
                if count <= 0:  # Redis ignores an empty or negative array
                    emit(start)
                    emit_from = i
                    self.state = _START
                    continue
                self.elements_left = count
                self.state = _BULK_LINE
                if count > HOLD_ARRAYS_OVER:
                    emit(start)
                    self.hold = bytearray(line)
                    emit_from = i
                    continue
            else:
                length = int(number) if valid else -1
                if length < 0 or length > self.max_bulk_len:
                    emit(start)
                    out.error = "invalid bulk length"
                    return out
                if length > max_bulk:
                    emit(start)
                    out.error = "unauthenticated bulk length"
                    return out
                self.body_left = length + 2
                self.state = _BULK_BODY
            if split:
                emit(start)
                if self.hold is not None:
                    self.hold += line
                else:
                    pieces.append(line)
                emit_from = i
        emit(i)
        if i < n:
            out.rest = data[i:]
        return out

    @staticmethod
    def first_inline_offset(data: bytes) -> int | None:
        """Where the first request hiredis refuses begins in a read that starts on a
        boundary — an inline line, or an array header outside -1 … ``HOLD_ARRAYS_OVER``
        (hiredis is capped there, see ``hiredis_limits``) — when every request before it is
        a well-formed multibulk frame; else None.

        This tells the network layer where to pick up with the framer.
        """
        probe = RequestFramer(MAX_BULK_SCAN)
        offset = 0
        while offset < len(data):
            if data[offset] != 42:
                return offset
            end = data.find(b"\r\n", offset, offset + 24)
            count = data[offset + 1:end]
            if end > 0 and _INTEGER.fullmatch(count) and not -1 <= int(count) <= HOLD_ARRAYS_OVER:
                return offset
            framed = probe.feed(data[offset:], authenticated=True, one_request=True)
            if framed.error is not None or not probe.at_boundary:
                return None
            offset = len(data) - len(framed.rest)
        return None

    def resync(self, data: bytes) -> str | None:
        """Track a read hiredis was already given whole (it started on a boundary).

        Returns Redis's error text when the read breaks a limit; the state then describes
        the stream up to that point only.
        """
        # The fast path only passes reads that end with a newline and hold no large array,
        # so no part of a header line and no held array is left to send twice.
        result = self.feed(data, authenticated=True)
        self.hold = None
        self.line.clear()
        return result.error
