"""The typed record layer: every record class round-trips through the on-disk frame and
applies itself to the stores; the registry refuses a type byte taken twice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from pion.server.persist.records import HEADER_SIZE, RecordType, decode_fields, encode_fields, frame_bytes
from pion.server.store.records import (
    RECORD_CLASSES, Evict, FtCreate, FtDropIndex, FtGraph, KeyExpire, KeyHDel, KeyHSet, KeysDel, KeySet,
    KeysFlush, PrefixDrop, PrefixRegister, Record, SsmDrop, SsmEvict, SsmFlush, SsmStore,
    SemanticDel, SemanticFlush, SemanticFlushAll, SemanticSet, VCreate, VDrop, VFlush, VStoreBatch,
    decode_record, register,
)
from pion.server.store.records import (KeyCopy, KeyExpireDb, KeyHDelDb, KeyHSetDb, KeyMove, KeyRename, KeySetDb,
                                       KeysDelDb, KeysFlushDb, KeysSwapDb)

VEC = np.asarray([0.6, 0.8], dtype="<f4").tobytes()
# One example per record class: adding a class means adding its example here.
EXAMPLES: dict[type[Record], Record] = {
    VCreate: VCreate("s", 8, ("fp16", "int8"), False),
    VStoreBatch: VStoreBatch("s", 1, 2, 3, bytes(range(48))),
    VDrop: VDrop("s"),
    PrefixRegister: PrefixRegister("ns", 64, ("fp16",), ("fp16",), True, 16, b"\x01" * 16, 2),
    PrefixDrop: PrefixDrop("ns"),
    Evict: Evict(("ns_pk", "ns_pv")),
    VFlush: VFlush(),
    KeySet: KeySet(b"k\x00", b"v" * 5000, 4_102_444_800_000),
    KeysDel: KeysDel((b"a", b"b")),
    KeyExpire: KeyExpire(b"k", None),
    KeysFlush: KeysFlush(),
    SemanticSet: SemanticSet("c", "scope", "text", b"resp", VEC, 0, 1_750_000_000_000, None, 7, 9),
    SemanticDel: SemanticDel("c", (1, 2)),
    SemanticFlush: SemanticFlush("c"),
    SemanticFlushAll: SemanticFlushAll(),
    SsmStore: SsmStore("ns", 3, b"\x00state\xff"),
    SsmDrop: SsmDrop("ns", None),
    SsmEvict: SsmEvict(("a", "b")),
    SsmFlush: SsmFlush(),
    KeyHSet: KeyHSet(b"h\x00", (b"f", b"v", b"g", b"")),
    KeyHDel: KeyHDel(b"h", (b"f", b"g")),
    FtCreate: FtCreate("idx", (b"PREFIX", b"1", b"doc:", b"SCHEMA", b"t", b"TEXT")),
    FtDropIndex: FtDropIndex("idx"),
    FtGraph: FtGraph("idx", "v", (0, 1), (b"doc:a", b"doc:b"), b"\x00graph\xff"),
    KeySetDb: KeySetDb(b"k", b"v", None, 3),
    KeysDelDb: KeysDelDb((b"a", b"b"), 15),
    KeyExpireDb: KeyExpireDb(b"k", 4_102_444_800_000, 1),
    KeysFlushDb: KeysFlushDb(2),
    KeyHSetDb: KeyHSetDb(b"h", (b"f", b"v"), 4),
    KeyHDelDb: KeyHDelDb(b"h", (b"f",), 5),
    KeysSwapDb: KeysSwapDb(0, 7),
    KeyRename: KeyRename(1, b"old", b"new"),
    KeyCopy: KeyCopy(0, b"src", 3, b"dst"),
    KeyMove: KeyMove(2, b"k", 0),
}


def test_every_registered_record_class_has_an_example() -> None:
    assert sorted(cls.__name__ for cls in RECORD_CLASSES.values()) == sorted(c.__name__ for c in EXAMPLES)


@pytest.mark.parametrize("cls", list(EXAMPLES), ids=lambda c: c.__name__)
def test_a_record_survives_framing_and_decoding_with_equal_fields(cls: type[Record]) -> None:
    record = EXAMPLES[cls]
    raw = frame_bytes(record.TYPE, 5, record.fields())
    assert raw[5] == cls.TYPE
    decoded = decode_record(raw[5], decode_fields(raw[HEADER_SIZE:-4]))
    assert type(decoded) is cls
    assert {k: bytes(v) if isinstance(v, memoryview) else v for k, v in decoded.fields().items()} == \
        record.fields()


def test_field_order_on_disk_is_the_declaration_order() -> None:
    assert list(EXAMPLES[PrefixRegister].fields()) == [
        "ns", "kv_dim", "k_formats", "v_formats", "uniform", "block_size", "hashes", "layers"]
    assert list(SemanticSet("c", "s", "t", b"r", VEC, 0, 0, None, 1).fields())[-1] == "id"  # no next_id


def test_an_ssm_drop_of_every_layer_writes_its_layer_as_none_and_reads_a_missing_one_as_none() -> None:
    assert EXAMPLES[SsmDrop].fields() == {"ns": "ns", "layer": None}
    assert decode_record(RecordType.SSM_PREFIX_DROP, {"ns": "a"}) == SsmDrop("a", None)


def test_the_hdel_record_keeps_its_on_disk_field_name() -> None:
    assert EXAMPLES[KeyHDel].fields() == {"key": b"h", "fields": (b"f", b"g")}


def test_a_record_of_an_unknown_type_or_missing_a_field_is_refused() -> None:
    with pytest.raises(ValueError, match="no record class for type 99"):
        decode_record(99, {})
    with pytest.raises(KeyError, match="'sid'"):
        decode_record(RecordType.V_DROP, {})


def test_registering_a_second_class_for_a_type_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        @register
        @dataclass(slots=True)
        class AnotherSet(Record):
            TYPE: ClassVar[RecordType] = RecordType.SET


@pytest.mark.parametrize("key, value, deadline", [
    (b"k", b"", None), (b"", b"v", 0), (b"k" * 1023, b"v" * 1023, -1), (b"k", b"v" * 1024, None),
    (b"\x00\xff", b"x" * 5000, 4_102_444_800_000)])
def test_the_set_records_direct_payload_is_the_generic_encoders_bytes(
        key: bytes, value: bytes, deadline: int | None) -> None:
    record = KeySet(key, value, deadline)
    payload = record.small_payload()
    parts = encode_fields(record.fields())
    if len(key) < 1024 and len(value) < 1024:
        assert payload == b"".join(bytes(p) for p in parts)
    else:
        assert payload is None  # large values keep the zero-copy path


def test_a_keyspace_record_of_database_n_is_its_db_twin_and_of_database_0_itself() -> None:
    assert KeySet(b"k", b"v", None).in_db(3) == KeySetDb(b"k", b"v", None, 3)
    assert KeyHDel(b"h", (b"f",)).in_db(2) == KeyHDelDb(b"h", (b"f",), 2)
    assert KeysFlush().in_db(9) == KeysFlushDb(9)
    assert KeyRename(1, b"a", b"b").in_db(4) == KeyRename(1, b"a", b"b")
    assert KeyHDelDb(b"h", (b"f",), 2).fields() == {"key": b"h", "fields": (b"f",), "db": 2}
