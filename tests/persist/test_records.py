"""The record frame: exact bytes, round trips, and damage detection."""

from __future__ import annotations

import pytest

from pion.server.persist.records import (
    HEADER_SIZE,
    HeaderError,
    RecordFormatError,
    RecordType,
    check_payload,
    decode_fields,
    frame,
    frame_bytes,
    parse_header,
    record_type_name,
)


def test_worked_example_from_the_format_doc_has_these_exact_bytes() -> None:
    data = frame_bytes(RecordType.V_DROP, 7, {"sid": "a"})
    assert data.hex(" ") == ("50 52 45 43 01 03 00 00 0c 00 00 00 07 00 00 00 00 00 00 00 60 e7 a1 7d "
                             "01 00 03 73 69 64 73 01 00 00 00 61 b9 45 81 3f")


def test_every_value_type_round_trips() -> None:
    rows = bytes(range(256)) * 64
    fields = {"sid": "s|ü", "layer": 3, "neg": -5, "rows": memoryview(rows), "small": b"\x00\x01",
              "formats": ("fp16", "fp8"), "uniform": True, "hashes": None, "ms": 1.25, "keys": (b"a", b"bb")}
    data = frame_bytes(RecordType.V_STOREBATCH, 1, fields)
    header = parse_header(data[:HEADER_SIZE])
    payload = data[HEADER_SIZE:HEADER_SIZE + header.length]
    assert check_payload(payload, data[HEADER_SIZE + header.length:]) is True
    decoded = decode_fields(payload)
    decoded["rows"] = bytes(decoded["rows"])
    decoded["small"] = bytes(decoded["small"])
    decoded["keys"] = tuple(bytes(k) for k in decoded["keys"])
    assert decoded == {**fields, "rows": rows}
    assert header.rtype == RecordType.V_STOREBATCH
    assert header.seq == 1
    assert header.record_size == len(data)


def test_large_blobs_are_passed_to_writev_without_a_copy() -> None:
    rows = bytearray(65536)
    parts = frame(RecordType.V_STOREBATCH, 1, {"rows": memoryview(rows)})
    views = [p for p in parts if isinstance(p, memoryview)]
    assert len(views) == 1
    assert views[0].obj is rows


def test_a_flipped_header_bit_is_detected() -> None:
    data = bytearray(frame_bytes(RecordType.SET, 9, {"key": b"k", "value": b"v"}))
    data[9] ^= 0x01  # length field
    with pytest.raises(HeaderError, match="checksum"):
        parse_header(bytes(data[:HEADER_SIZE]))


def test_a_flipped_payload_bit_fails_the_checksum() -> None:
    data = bytearray(frame_bytes(RecordType.SET, 9, {"key": b"k", "value": b"v"}))
    data[HEADER_SIZE + 5] ^= 0x40
    header = parse_header(bytes(data[:HEADER_SIZE]))
    end = HEADER_SIZE + header.length
    assert check_payload(bytes(data[HEADER_SIZE:end]), bytes(data[end:])) is False


def test_a_record_from_a_newer_format_version_is_refused() -> None:
    import struct

    from pion.server.persist.records import crc
    head = struct.pack("<4sBBHIQ", b"PREC", 2, 6, 0, 0, 1)
    with pytest.raises(HeaderError, match="newer"):
        parse_header(head + struct.pack("<I", crc(head)))


def test_an_unsupported_value_type_is_refused_when_encoding() -> None:
    with pytest.raises(RecordFormatError, match="dict"):
        frame(RecordType.SET, 1, {"key": {"nested": 1}})


def test_record_type_names_read_like_the_commands() -> None:
    assert record_type_name(RecordType.V_STOREBATCH) == "V.STOREBATCH"
    assert record_type_name(RecordType.KV_PREFIX_REGISTER) == "KV.PREFIX.REGISTER"
    assert record_type_name(99) == "type 99"
