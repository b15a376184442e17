"""Chained block hashes: the table a prefix registers with KV.PREFIX.REGISTER … BLOCKS."""

from __future__ import annotations

import hashlib
import struct

import pytest

from pion.client.block_hashes import (
    BlockTable,
    block_hashes,
    block_table,
    pack_hashes,
    unpack_bitmap,
    unpack_blocks_reply,
)


def test_first_block_hash_matches_the_documented_formula() -> None:
    digest = hashlib.sha256(bytes(8) + struct.pack("<2I", 1, 2)).digest()
    assert block_hashes([1, 2, 3], block_size=2) == (int.from_bytes(digest[:8], "little"),)


def test_a_trailing_partial_block_is_not_hashed() -> None:
    assert len(block_hashes(list(range(130)), block_size=64)) == 2
    assert block_hashes(list(range(63)), block_size=64) == ()


def test_each_hash_covers_its_parent_so_a_changed_first_block_changes_every_hash() -> None:
    base = block_hashes(list(range(256)), block_size=64)
    changed = block_hashes([999] + list(range(1, 256)), block_size=64)
    assert [a == b for a, b in zip(base, changed, strict=True)] == [False, False, False, False]


def test_equal_prefixes_share_their_leading_hashes() -> None:
    short = block_hashes(list(range(128)), block_size=64)
    long = block_hashes(list(range(128)) + [7] * 64, block_size=64)
    assert long[:2] == short


def test_blocks_reply_round_trips_through_the_wire_layout() -> None:
    table = block_table(list(range(200)), block_size=64)
    reply = struct.pack("<II", 64, len(table.hashes)) + table.blob()
    assert unpack_blocks_reply(reply) == table


def test_blocks_reply_with_a_wrong_count_is_refused() -> None:
    with pytest.raises(ValueError, match="says 2 hashes"):
        unpack_blocks_reply(struct.pack("<II", 64, 2) + pack_hashes([1]))


def test_membership_bitmap_is_lsb_first_within_each_byte() -> None:
    assert unpack_bitmap(bytes([0b00000101, 0b1]), 9) == [True, False, True, False, False, False, False, False, True]


def test_block_table_blob_is_little_endian_u64() -> None:
    assert BlockTable(16, (1, 2**64 - 1)).blob() == b"\x01" + bytes(7) + b"\xff" * 8
