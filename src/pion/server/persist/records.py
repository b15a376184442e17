"""The record: the one on-disk unit of the WAL and of snapshots.

Every WAL entry and every snapshot entry is one framed, checksummed record.
All integers are little-endian.

Frame (24-byte header, payload, 4-byte trailer)::

    offset size field
    0      4    magic          b"PREC"
    4      1    version        1 (FORMAT_VERSION; a reader refuses newer ones)
    5      1    type           RecordType (below)
    6      2    flags          0 (reserved)
    8      4    length         payload bytes (u32)
    12     8    seq            sequence number (u64; 0 inside snapshots)
    20     4    header_crc     crc32c of bytes 0..19
    24     len  payload        a field map (below)
    24+len 4    payload_crc    crc32c of the payload

The header has its own checksum so a damaged ``length`` is never trusted: a
reader knows whether the frame it is looking at is real before it skips ahead.

Payload: a field map, ``u16 n_fields`` then per field ``u8 name_len, name
(ascii), u8 tag, value``. Tags::

    i  i64             f  f64              t  u8 bool
    s  u32 len + utf-8 b  u64 len + bytes  n  (nothing: None)
    l  u32 count + count tagged values (tag byte + value each; decoded as a tuple)

Record types, their field names and order: one class per logged mutation in
``pion.server.store.records`` (the schema's one home); ``RecordType`` below is only the
byte table. 127 SNAPSHOT.END (records i, begin_seq i, end_seq i) is ``snapshot.py``'s.

Worked example: ``V.DROP`` of session ``"a"`` with seq 7 is 40 bytes::

    50 52 45 43  01  03  00 00  0c 00 00 00  07 00 00 00 00 00 00 00  60 e7 a1 7d
    magic        ver  type flags length=12    seq=7                    header crc32c
    01 00  03 73 69 64  73  01 00 00 00  61                           payload: 1 field, "sid" s "a"
    b9 45 81 3f                                                       payload crc32c
"""

from __future__ import annotations

import enum
import operator
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import crc32c

MAGIC: Final = b"PREC"
FORMAT_VERSION: Final = 1
HEADER = struct.Struct("<4sBBHIQI")
HEADER_SIZE = HEADER.size  # 24
TRAILER_SIZE = 4
_HEADER_NO_CRC: Final = struct.Struct("<4sBBHIQ")
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
# The two packs of every record, bound once: to compiled code a Struct is a Python object, so
# ``_U32.pack(...)`` looked ``pack`` up on its type at each call (2.5% of a non-pipelined SET's
# server CPU went to those lookups; issue 13).
_pack_header: Final = _HEADER_NO_CRC.pack
_pack_u32: Final = _U32.pack
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
MAX_PAYLOAD = 2**32 - 1
# Blobs at least this large are handed to writev as their own buffer instead of copied.
_ZERO_COPY_MIN = 4096


class RecordType(enum.IntEnum):
    """What a record describes; the byte in the frame header."""

    V_CREATE = 1
    V_STOREBATCH = 2
    V_DROP = 3
    KV_PREFIX_REGISTER = 4
    KV_PREFIX_DROP = 5
    SET = 6
    DEL = 7
    EXPIRE = 8
    FLUSHALL = 9
    EVICT = 10
    V_FLUSH = 11
    SEMANTIC_SET = 12
    SEMANTIC_DEL = 13
    SEMANTIC_FLUSH = 14
    SEMANTIC_FLUSHALL = 15
    SSM_PREFIX_STORE = 16
    SSM_PREFIX_DROP = 17
    SSM_PREFIX_EVICT = 18
    SSM_PREFIX_FLUSH = 19
    HSET = 40  # hashes and FT.* start at 40: room below for other families' records
    HDEL = 41
    FT_CREATE = 42
    FT_DROPINDEX = 43
    FT_GRAPH = 44
    # numbered databases (SELECT n, n > 0) and the keyspace operations that move values
    SET_DB = 60
    DEL_DB = 61
    EXPIRE_DB = 62
    FLUSHDB = 63
    HSET_DB = 64
    HDEL_DB = 65
    SWAPDB = 66
    RENAME = 67
    COPY = 68
    MOVE = 69
    SNAPSHOT_END = 127


def crc(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """crc32c (hardware-accelerated by the ``crc32c`` package), chainable."""
    return int(crc32c.crc32c(data, value))


class RecordFormatError(ValueError):
    """A field value cannot be encoded (unsupported type, name too long, payload too big)."""


def _encode_value(value: Any, out: bytearray, parts: list[Any]) -> None:
    """Append one tagged value; large blobs become their own part (no copy)."""
    kind = type(value)
    if kind is int:  # the common case first (bool is its own type and handled below)
        out += b"i" + _I64.pack(value)
    elif kind is str:
        data = value.encode()
        out += b"s" + _pack_u32(len(data)) + data
    elif kind is memoryview or kind is bytes or kind is bytearray:
        view = value.cast("B") if kind is memoryview and value.format != "B" else value
        size = view.nbytes if kind is memoryview else len(view)
        out += b"b" + _U64.pack(size)
        if size >= _ZERO_COPY_MIN:
            parts.append(bytes(out))
            out.clear()
            parts.append(view)
        else:
            out += view
    elif value is None:
        out += b"n"
    elif kind is bool:
        out += b"t" + _U8.pack(1 if value else 0)
    elif kind is float:
        out += b"f" + _F64.pack(value)
    elif isinstance(value, (list, tuple)):
        out += b"l" + _pack_u32(len(value))
        for item in value:
            _encode_value(item, out, parts)
    elif isinstance(value, str):
        _encode_value(str(value), out, parts)  # str subclasses such as typed ids
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _encode_value(memoryview(value), out, parts)
    else:
        try:
            number = operator.index(value)  # numpy integers
        except TypeError:
            raise RecordFormatError(f"cannot persist a value of type {type(value).__name__}") from None
        out += b"i" + _I64.pack(number)


_NAMES: dict[str, bytes] = {}


def _field_name(name: str) -> bytes:
    """``u8 len + ascii name``, cached (field names are a small fixed set)."""
    raw = _NAMES.get(name)
    if raw is None:
        encoded = name.encode("ascii")
        if len(encoded) > 255:
            raise RecordFormatError(f"field name too long: {name[:40]!r}")
        raw = _U8.pack(len(encoded)) + encoded
        if len(_NAMES) < 1024:
            _NAMES[name] = raw
    return raw


_crc32c: Final = crc32c.crc32c
_TAG_I64: Final = struct.Struct("<cq")
_TAG_U64 = struct.Struct("<cQ")


_COUNTS: Final = [_U16.pack(n) for n in range(16)]  # the u16 field count of every keyspace record
_BYTES_TAGS: Final = [b"b" + _U64.pack(n) for n in range(1024)]  # tag + length of a short bytes value


def _encode_into(fields: Mapping[str, Any], parts: list[Any]) -> bytearray:
    """Encode ``fields``; zero-copy blobs (and the bytes before each) go to ``parts``,
    the rest is returned. Small bytes and ints (every keyspace record, most V-store
    ones) are appended inline with prebuilt count and tag+length prefixes (a pipelined
    SET spends most of its CPU framing its WAL record); the rest goes through ``_encode_value``.
    """
    count = len(fields)
    out = bytearray(_COUNTS[count] if count < 16 else _U16.pack(count))
    names = _NAMES
    tags = _BYTES_TAGS
    for name, value in fields.items():
        raw = names.get(name)
        out += raw if raw is not None else _field_name(name)
        kind = type(value)
        if kind is bytes:
            size = len(value)
            if size < 1024:
                out += tags[size]
                out += value
                continue
            if size < _ZERO_COPY_MIN:
                out += _TAG_U64.pack(b"b", size)
                out += value
                continue
            _encode_value(value, out, parts)
        elif value is None:
            out += b"n"
        elif kind is int:
            out += _TAG_I64.pack(b"i", value)
        else:
            _encode_value(value, out, parts)
    return out


def encode_fields(fields: Mapping[str, Any]) -> list[Any]:
    """The payload as a list of buffers (bytes and zero-copy memoryviews)."""
    parts: list[Any] = []
    out = _encode_into(fields, parts)
    if out:
        parts.append(bytes(out))
    return parts


def frame(rtype: RecordType, seq: int, fields: Mapping[str, Any]) -> list[Any]:
    """One whole record as buffers ready for ``os.writev``: header, payload parts, trailer."""
    return _frame_payload(rtype, seq, encode_fields(fields))


def _frame_payload(rtype: RecordType, seq: int, payload: list[Any]) -> list[Any]:
    if len(payload) == 1 and len(payload[0]) <= MAX_PAYLOAD:  # no zero-copy blob: the common case
        data = payload[0]
        head = _pack_header(MAGIC, FORMAT_VERSION, rtype, 0, len(data), seq)
        return [head + _pack_u32(_crc32c(head)), data, _pack_u32(_crc32c(data))]
    length = sum(len(p) if not isinstance(p, memoryview) else p.nbytes for p in payload)
    payload_crc = 0
    for part in payload:
        payload_crc = crc(part, payload_crc)
    if length > MAX_PAYLOAD:
        raise RecordFormatError(f"record payload of {length} bytes exceeds 4 GiB")
    head = _pack_header(MAGIC, FORMAT_VERSION, rtype, 0, length, seq)
    return [head + _pack_u32(_crc32c(head)), *payload, _pack_u32(payload_crc)]


def append_small(buf: bytearray, rtype: RecordType, seq: int, fields: Mapping[str, Any],
                 max_payload: int) -> list[Any] | None:
    """The WAL's batched fast path: when the payload is one buffer of at most
    ``max_payload`` bytes (no zero-copy blob), append the whole record to ``buf`` and
    return None; otherwise append nothing and return ``frame()``'s parts. Same bytes as
    ``frame``, minus the intermediate list and payload copy."""
    parts: list[Any] = []
    out = _encode_into(fields, parts)
    if parts or len(out) > max_payload:
        if out:
            parts.append(bytes(out))
        return _frame_payload(rtype, seq, parts)
    frame_payload_into(buf, rtype, seq, out)
    return None


def frame_payload_into(buf: bytearray, rtype: RecordType, seq: int, payload: bytes | bytearray) -> None:
    """Append one whole record around an already-encoded ``payload`` to ``buf``."""
    head = _pack_header(MAGIC, FORMAT_VERSION, rtype, 0, len(payload), seq)
    buf += head
    buf += _pack_u32(_crc32c(head))
    buf += payload
    buf += _pack_u32(_crc32c(payload))


def frame_payload(rtype: RecordType, seq: int, payload: bytes) -> list[Any]:
    """One whole record around an already-encoded ``payload``, as buffers for ``os.writev``."""
    return _frame_payload(rtype, seq, [payload])


_SET_NAMES: Final = (_field_name("key"), _field_name("value"), _field_name("expire_at_ms"))


def set_payload(key: bytes, value: bytes, expire_at_ms: int | None) -> bytes | None:
    """The SET record's payload built directly (the hot path of a pipelined SET): the same
    bytes ``encode_fields`` gives for ``{"key", "value", "expire_at_ms"}``; None when a
    value needs the general encoder (a key or value of 1 KB or more, a non-bytes type)."""
    if type(key) is not bytes or type(value) is not bytes or len(key) >= 1024 or len(value) >= 1024:
        return None
    k_name, v_name, e_name = _SET_NAMES
    tags = _BYTES_TAGS
    tail = b"n" if expire_at_ms is None else _TAG_I64.pack(b"i", expire_at_ms)
    return b"".join((_COUNTS[3], k_name, tags[len(key)], key, v_name, tags[len(value)], value, e_name, tail))


def frame_bytes(rtype: RecordType, seq: int, fields: Mapping[str, Any]) -> bytes:
    """One record as a single bytes object (tests, small records)."""
    return b"".join(bytes(p) for p in frame(rtype, seq, fields))


@dataclass(frozen=True, slots=True)
class Header:
    """A parsed, checksum-verified frame header."""

    version: int
    rtype: int
    flags: int
    length: int
    seq: int

    @property
    def record_size(self) -> int:
        return HEADER_SIZE + self.length + TRAILER_SIZE


class HeaderError(ValueError):
    """The 24 bytes at this offset are not a valid frame header."""


def parse_header(data: bytes | bytearray | memoryview) -> Header:
    """Check magic and header checksum; raises HeaderError with the reason."""
    magic, version, rtype, flags, length, seq, header_crc = HEADER.unpack(data)
    if magic != MAGIC:
        raise HeaderError(f"bad magic {bytes(magic)!r} (expected {MAGIC!r})")
    if crc(memoryview(data)[:20]) != header_crc:
        raise HeaderError("header checksum mismatch")
    if version > FORMAT_VERSION:
        raise HeaderError(f"record format version {version} is newer than this build's {FORMAT_VERSION}")
    return Header(version, rtype, flags, length, seq)


def check_payload(payload: bytes | bytearray | memoryview, trailer: bytes | bytearray | memoryview) -> bool:
    """True when the payload matches its crc32c trailer."""
    expected: int = _U32.unpack(trailer)[0]
    return crc(payload) == expected


class _Cursor:
    __slots__ = ("view", "pos")

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.pos = 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.view):
            raise RecordFormatError("payload ends inside a field")
        chunk = self.view[self.pos:end]
        self.pos = end
        return chunk

    def unpack(self, st: struct.Struct) -> Any:
        return st.unpack(self.take(st.size))[0]


def _decode_value(cur: _Cursor) -> Any:
    tag = bytes(cur.take(1))
    if tag == b"n":
        return None
    if tag == b"t":
        return cur.unpack(_U8) != 0
    if tag == b"i":
        return cur.unpack(_I64)
    if tag == b"f":
        return cur.unpack(_F64)
    if tag == b"s":
        return bytes(cur.take(cur.unpack(_U32))).decode()
    if tag == b"b":
        return cur.take(cur.unpack(_U64))
    if tag == b"l":
        return tuple(_decode_value(cur) for _ in range(cur.unpack(_U32)))
    raise RecordFormatError(f"unknown value tag {tag!r}")


def decode_fields(payload: bytes | memoryview) -> dict[str, Any]:
    """Field map from a verified payload. Blobs come back as memoryviews into ``payload``
    (lists of blobs as tuples of memoryviews); raises RecordFormatError if malformed."""
    cur = _Cursor(memoryview(payload))
    fields: dict[str, Any] = {}
    for _ in range(cur.unpack(_U16)):
        name = bytes(cur.take(cur.unpack(_U8))).decode("ascii")
        fields[name] = _decode_value(cur)
    if cur.pos != len(cur.view):
        raise RecordFormatError(f"{len(cur.view) - cur.pos} stray bytes after the last field")
    return fields


def record_type_name(rtype: int) -> str:
    """``V.STOREBATCH`` style name for logs, or ``type <n>`` for an unknown one."""
    try:
        name = RecordType(rtype).name
    except ValueError:
        return f"type {rtype}"
    for prefix, dotted in (("KV_PREFIX_", "KV.PREFIX."), ("SSM_PREFIX_", "SSM.PREFIX."), ("V_", "V."),
                           ("SNAPSHOT_", "SNAPSHOT."), ("SEMANTIC_", "SEMANTIC."), ("FT_", "FT.")):
        if name.startswith(prefix):
            return dotted + name[len(prefix):]
    return name
