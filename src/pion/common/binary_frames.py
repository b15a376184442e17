"""The binary fast lane's framing (port+1): a length-prefixed request/reply protocol, no RESP.

All integers little-endian. A request:

  offset  size  field
  0       2     magic 0xCA5E (bytes 5E CA)
  2       1     version (1)
  3       1     command byte (``CMD_*``)
  4       4     request id (u32, echoed in the reply)
  8       4     field count F (u32)
  12      4     body length (u32) = sum over fields of (4 + field length)
  16      ...   F fields, each: u32 length, then that many bytes

The fields are the command's arguments after its name, byte for byte as the RESP words would be
(``ATTEND.PREFIX.QUERY_FUSED``'s ten or eleven arguments, integers as decimal text). A reply:

  0       2     magic 0xCA5E
  2       1     version (1)
  3       1     status (``STATUS_*``)
  4       4     request id of the request answered
  8       4     body length (u32)
  12      ...   body: the reply bytes for OK (a bulk reply's payload, or a status text such as
                ``OK``/``HIT``), else the error line without ``-`` (``ERR ...``, ``COLDMISS sid 3``)

Worked example — ``ATTEND.PREFIX.LOOKUP s 0`` as request 7:
  request  5E CA 01 21 | 07 00 00 00 | 02 00 00 00 | 0A 00 00 00 | 01 00 00 00 73 | 01 00 00 00 30
  reply    5E CA 01 00 | 07 00 00 00 | 03 00 00 00 | 48 49 54            ("HIT")
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

MAGIC = 0xCA5E
VERSION = 1
REQUEST_HEADER = struct.Struct("<HBBIII")  # magic, version, command, request id, field count, body length
REPLY_HEADER = struct.Struct("<HBBII")  # magic, version, status, request id, body length
FIELD_LEN = struct.Struct("<I")

CMD_AUTH = 0x01
CMD_PING = 0x02
CMD_ATTEND_PREFIX_STORE = 0x20
CMD_ATTEND_PREFIX_LOOKUP = 0x21
CMD_ATTEND_PREFIX_QUERY = 0x22
CMD_ATTEND_PREFIX_QUERY_SPARSE = 0x23
CMD_ATTEND_PREFIX_QUERY_FUSED = 0x24
CMD_ATTEND_PREFIX_QUERY_SPARSE_AUTO = 0x25
CMD_ATTEND_PREFIX_QUERY_SPARSE_AUTO_FUSED = 0x26
CMD_KV_PREFIX_WARM = 0x27

# command byte -> the RESP command it stands for
COMMAND_NAMES: dict[int, str] = {
    CMD_AUTH: "AUTH",
    CMD_PING: "PING",
    CMD_ATTEND_PREFIX_STORE: "ATTEND.PREFIX.STORE",
    CMD_ATTEND_PREFIX_LOOKUP: "ATTEND.PREFIX.LOOKUP",
    CMD_ATTEND_PREFIX_QUERY: "ATTEND.PREFIX.QUERY",
    CMD_ATTEND_PREFIX_QUERY_SPARSE: "ATTEND.PREFIX.QUERY_SPARSE",
    CMD_ATTEND_PREFIX_QUERY_FUSED: "ATTEND.PREFIX.QUERY_FUSED",
    CMD_ATTEND_PREFIX_QUERY_SPARSE_AUTO: "ATTEND.PREFIX.QUERY_SPARSE_AUTO",
    CMD_ATTEND_PREFIX_QUERY_SPARSE_AUTO_FUSED: "ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED",
    CMD_KV_PREFIX_WARM: "KV.PREFIX.WARM",
}

STATUS_OK = 0x00
STATUS_ERR = 0x01
STATUS_NOAUTH = 0x02
STATUS_COLDMISS = 0x03
STATUS_OOM = 0x04
STATUS_BY_CODE = {"NOAUTH": STATUS_NOAUTH, "COLDMISS": STATUS_COLDMISS, "OOM": STATUS_OOM}


class FrameError(ValueError):
    """Bytes that are not a frame of this protocol (bad magic or version, impossible lengths)."""


def encode_request(command: int, request_id: int, fields: Sequence[bytes | bytearray | memoryview]) -> list[bytes | bytearray | memoryview]:
    """A request as buffers for one scatter-gather write (``socket.sendmsg``); fields are not copied."""
    parts: list[bytes | bytearray | memoryview] = [b""]
    body = 0
    for field in fields:
        n = memoryview(field).nbytes
        parts.append(FIELD_LEN.pack(n))
        parts.append(field)
        body += 4 + n
    parts[0] = REQUEST_HEADER.pack(MAGIC, VERSION, command, request_id, len(fields), body)
    return parts


def encode_reply_header(status: int, request_id: int, body_len: int) -> bytes:
    return REPLY_HEADER.pack(MAGIC, VERSION, status, request_id, body_len)


def parse_request_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """(command, request id, field count, body length) of a 16-byte header; FrameError if foreign."""
    magic, version, command, request_id, n_fields, body_len = REQUEST_HEADER.unpack(data)
    if magic != MAGIC or version != VERSION:
        raise FrameError(f"not a Pion binary frame (magic {magic:#06x}, version {version})")
    if 4 * n_fields > body_len:
        raise FrameError(f"{n_fields} fields cannot fit a {body_len}-byte body")
    return command, request_id, n_fields, body_len


def split_fields(body: bytes | bytearray | memoryview, n_fields: int) -> list[bytes]:
    """The fields of a request body; FrameError when their lengths do not add up to the body."""
    view = memoryview(body)
    fields: list[bytes] = []
    pos = 0
    for _ in range(n_fields):
        if pos + 4 > len(view):
            raise FrameError("request body ends inside a field length")
        (n,) = FIELD_LEN.unpack_from(view, pos)
        pos += 4
        if pos + n > len(view):
            raise FrameError("request body ends inside a field")
        fields.append(bytes(view[pos:pos + n]))
        pos += n
    if pos != len(view):
        raise FrameError(f"request body has {len(view) - pos} bytes after its last field")
    return fields


def parse_reply_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(status, request id, body length) of a 12-byte reply header; FrameError if foreign."""
    magic, version, status, request_id, body_len = REPLY_HEADER.unpack(data)
    if magic != MAGIC or version != VERSION:
        raise FrameError(f"not a Pion binary reply (magic {magic:#06x}, version {version})")
    return status, request_id, body_len
