"""pion.common.blocks.BlockTable: the one block table, used by the client and the server."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pion.common.blocks import BlockTable, pack_hashes, unpack_bitmap
import struct

from pion.server.store import prefixes

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def test_the_documented_wire_examples() -> None:
    table = BlockTable(64, (1, 2))  # type: ignore[arg-type]
    assert table.wire() == bytes.fromhex("40000000" "02000000") + pack_hashes([1, 2])
    assert table.membership(pack_hashes([2, 9, 1])) == bytes([0x05])
    assert BlockTable.from_wire(table.wire()) == table
    assert BlockTable.from_blob(64, table.blob()) == table


def test_the_server_registry_keeps_the_same_block_table_class() -> None:
    assert prefixes.BlockTable is BlockTable


@given(st.lists(U64, max_size=40), st.lists(U64, max_size=40), st.integers(1, 4096))
def test_wire_and_membership_agree_with_a_plain_python_oracle(hashes: list[int], probes: list[int],
                                                              block_size: int) -> None:
    table = BlockTable.from_blob(block_size, pack_hashes(hashes))
    asked = probes + hashes[:3]
    bitmap = table.membership(pack_hashes(asked))
    assert table.wire() == struct.pack(f"<II{len(hashes)}Q", block_size, len(hashes), *hashes)
    assert unpack_bitmap(bitmap, len(asked)) == [p in set(hashes) for p in asked]


@pytest.mark.parametrize(("data", "message"), [
    (b"\x00" * 7, "KV.PREFIX.BLOCKS reply of 7 bytes is shorter than its 8-byte header"),
    (bytes.fromhex("4000000002000000") + bytes(8), "KV.PREFIX.BLOCKS reply says 2 hashes but carries 8 bytes"),
])
def test_a_malformed_blocks_reply_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(ValueError) as info:
        BlockTable.from_wire(data)
    assert str(info.value) == message


def test_a_blob_that_is_not_whole_u64s_is_refused() -> None:
    with pytest.raises(ValueError) as info:
        BlockTable.from_blob(64, bytes(12))
    assert str(info.value) == "a block-hash blob is whole u64s; got 12 bytes"
    assert BlockTable.from_blob(64, np.array([5], "<u8").tobytes()).hashes == (5,)
