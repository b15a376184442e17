"""Render reply values (``pion.server.resp.replies``) as RESP2 or RESP3 bytes.

Sans-I/O: ``encode_reply`` appends chunks to a list the network layer later hands to
``transport.writelines``. Small replies become one ``bytes`` chunk; a payload of
``LARGE_PAYLOAD`` bytes or more is appended as its own chunk *without copying* (the
header and trailing CRLF go around it), so a 32 MB GET costs no extra memcpy here.

Worked example (RESP3 client, reply ``{"a": 1.5, "b": [None, b"x"]}``)::

    %2\\r\\n $1\\r\\na\\r\\n ,1.5\\r\\n $1\\r\\nb\\r\\n *2\\r\\n _\\r\\n $1\\r\\nx\\r\\n

and the same value for a RESP2 client::

    *4\\r\\n $1\\r\\na\\r\\n $3\\r\\n1.5\\r\\n $1\\r\\nb\\r\\n *2\\r\\n $-1\\r\\n $1\\r\\nx\\r\\n
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Final

from pion.server.resp.replies import (
    OK, EncodeError, ErrorReply, NullArray, RawReply, SimpleString, Verbatim,
)

# Final: C statics in the compiled build, not a module-dict lookup per reply (an MGET of 10
# keys read CRLF ten times; issue 13).
CRLF: Final = b"\r\n"
LARGE_PAYLOAD: Final = 16 * 1024  # payloads at least this big are queued as their own chunk

OK_BYTES: Final = b"+OK\r\n"
_NULL2: Final = b"$-1\r\n"
_NULL3: Final = b"_\r\n"
_NULL_ARRAY2: Final = b"*-1\r\n"
_INTS: Final = [b":%d\r\n" % i for i in range(-1, 1025)]
BULK_HEADS: Final = [b"$%d\r\n" % n for n in range(1024)]
_SIMPLE: Final[dict[str, bytes]] = {}  # rendered simple strings (+OK, +PONG, +HIT, ...)
_OK: Final = OK
_SIMPLE_STRING: Final = SimpleString


__all__ = ["EncodeError", "encode_error", "encode_reply", "encode_to_bytes"]


def encode_error(code: str, message: str) -> bytes:
    """``-CODE message\\r\\n`` with CR/LF in the message flattened to spaces."""
    text = f"{code} {message}".replace("\r", " ").replace("\n", " ")
    return b"-" + text.encode("utf-8", "replace") + CRLF


def _encode_float(value: float) -> bytes:
    if math.isnan(value):
        return b"nan"
    if math.isinf(value):
        return b"inf" if value > 0 else b"-inf"
    return repr(value).encode()


def encode_reply(value: Any, resp3: bool, out: list[Any]) -> int:
    """Append the RESP rendering of ``value`` to ``out``; returns the bytes appended."""
    cls = type(value)
    if cls is bytes:
        # Typed as bytes here (``cls is bytes`` does not narrow ``value``): the concatenation
        # below is then a native bytes concat, not a generic ``+`` (an MGET's every item).
        data: bytes = value
        n = len(data)
        if n < 1024:
            chunk = BULK_HEADS[n] + data + CRLF
            out.append(chunk)
            return len(chunk)
        if n < LARGE_PAYLOAD:
            chunk = b"$%d\r\n%b\r\n" % (n, data)
            out.append(chunk)
            return len(chunk)
        head = b"$%d\r\n" % n
        out.append(head)
        out.append(data)
        out.append(CRLF)
        return len(head) + n + 2
    if value is _OK:
        out.append(OK_BYTES)
        return 5
    if cls is _SIMPLE_STRING:  # +PONG and other fixed status replies: one dict lookup
        simple = _SIMPLE.get(value.text)
        if simple is None:
            simple = b"+" + value.text.encode() + CRLF
            if len(_SIMPLE) < 256:
                _SIMPLE[value.text] = simple
        out.append(simple)
        return len(simple)
    if cls is int:
        if -1 <= value <= 1023:
            chunk = _INTS[value + 1]
        else:
            chunk = b":%d\r\n" % value
        out.append(chunk)
        return len(chunk)
    if value is None:
        chunk = _NULL3 if resp3 else _NULL2
        out.append(chunk)
        return len(chunk)
    if cls is list:
        items: list[Any] = value  # (typed: native length and iteration)
        head = b"*%d\r\n" % len(items)
        out.append(head)
        total = len(head)
        for item in items:
            total += encode_reply(item, resp3, out)
        return total
    if cls is tuple:
        head = b"*%d\r\n" % len(value)
        out.append(head)
        total = len(head)
        for item in value:
            total += encode_reply(item, resp3, out)
        return total
    if cls is str:
        return encode_reply(value.encode("utf-8"), resp3, out)
    if cls is bool:
        chunk = b":1\r\n" if value else b":0\r\n"
        out.append(chunk)
        return 4
    if cls is float:
        text = _encode_float(value)
        if resp3:
            chunk = b"," + text + CRLF
            out.append(chunk)
            return len(chunk)
        return encode_reply(text, resp3, out)
    if cls is dict:
        head = (b"%%%d\r\n" if resp3 else b"*%d\r\n") % (len(value) * (1 if resp3 else 2))
        out.append(head)
        total = len(head)
        for key, item in value.items():
            total += encode_reply(key, resp3, out)
            total += encode_reply(item, resp3, out)
        return total
    if cls is bytearray or cls is memoryview:
        view = memoryview(value)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        n = view.nbytes
        head = b"$%d\r\n" % n
        if n < LARGE_PAYLOAD:
            chunk = head + bytes(view) + CRLF
            out.append(chunk)
            return len(chunk)
        out.append(head)
        out.append(view)
        out.append(CRLF)
        return len(head) + n + 2
    if cls is Verbatim:
        data = value.text.encode("utf-8")
        if resp3:
            chunk = b"=%d\r\ntxt:%b\r\n" % (len(data) + 4, data)
            out.append(chunk)
            return len(chunk)
        return encode_reply(data, resp3, out)
    if cls is NullArray:
        chunk = _NULL3 if resp3 else _NULL_ARRAY2
        out.append(chunk)
        return len(chunk)
    if cls is ErrorReply:
        chunk = encode_error(value.code, value.message)
        out.append(chunk)
        return len(chunk)
    if cls is RawReply:
        out.append(value.data)
        return len(value.data)
    if cls is set or cls is frozenset:
        head = (b"~%d\r\n" if resp3 else b"*%d\r\n") % len(value)
        out.append(head)
        total = len(head)
        for item in value:
            total += encode_reply(item, resp3, out)
        return total
    if isinstance(value, numbers.Integral):  # IntEnum, numpy integer scalars
        return encode_reply(int(value), resp3, out)
    if isinstance(value, numbers.Real):  # numpy float scalars
        return encode_reply(float(value), resp3, out)
    try:
        view = memoryview(value)  # numpy arrays and other buffer objects
    except TypeError:
        raise EncodeError(f"no RESP rendering for {cls.__name__}") from None
    return encode_reply(view, resp3, out)


def encode_to_bytes(value: Any, resp3: bool) -> bytes:
    """Convenience for tests and small replies: the whole rendering as one bytes object."""
    out: list[Any] = []
    encode_reply(value, resp3, out)
    return b"".join(bytes(c) if not isinstance(c, bytes) else c for c in out)
