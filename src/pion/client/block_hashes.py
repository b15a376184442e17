"""Chained block hashes over token ids, the table a prefix carries in ``KV.PREFIX.REGISTER … BLOCKS``.

The shape follows vLLM's prefix-cache block hashes (``vllm/v1/core/kv_cache_utils.py``): a prefix is
cut into full blocks of ``block_size`` tokens and each block's hash covers its parent's hash, so equal
hashes mean equal *prefixes*, not just equal blocks. A trailing partial block is not hashed.

Hash (format v1), for block i with token ids t_0..t_{B-1}::

    parent_0 = 0
    h_i = u64_le( sha256( u64_le(parent_i) || u32_le(t_0) || ... || u32_le(t_{B-1}) )[:8] )
    parent_{i+1} = h_i

Wire blob: the hashes as little-endian u64 in token order (``hash_count * 8`` bytes); the table
and its wire forms are ``pion.common.blocks.BlockTable``, shared with the server.

Worked example, block_size 2, tokens [1, 2, 3]:
    one full block [1, 2]; h_0 = first 8 bytes (LE) of
    sha256(00 00 00 00 00 00 00 00 | 01 00 00 00 | 02 00 00 00); token 3 is not hashed.

sha256 (not Python's ``hash``) so every client, process and language computes the same table, which
is what a cache-aware router needs to compare tables against KV.PREFIX.MEMBERSHIP probes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from pion.common.blocks import BlockTable, pack_hashes, unpack_bitmap
from pion.common.ids import BlockHash

__all__ = ["DEFAULT_BLOCK_SIZE", "BlockTable", "block_hashes", "block_table", "pack_hashes", "unpack_bitmap",
           "unpack_blocks_reply"]

DEFAULT_BLOCK_SIZE = 64
_MAX_TOKEN_ID = 0xFFFFFFFF


def block_hashes(token_ids: Sequence[int], block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[BlockHash, ...]:
    """Chained hashes of every full block of ``token_ids``."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    out: list[BlockHash] = []
    parent = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start:start + block_size]
        if min(block) < 0 or max(block) > _MAX_TOKEN_ID:
            raise ValueError("token ids must fit in an unsigned 32-bit integer")
        payload = struct.pack(f"<Q{block_size}I", parent, *block)
        parent = int.from_bytes(hashlib.sha256(payload).digest()[:8], "little")
        out.append(BlockHash(parent))
    return tuple(out)


def block_table(token_ids: Sequence[int], block_size: int = DEFAULT_BLOCK_SIZE) -> BlockTable:
    """The ``BlockTable`` of a prefix."""
    return BlockTable(block_size, block_hashes(token_ids, block_size))


def unpack_blocks_reply(data: bytes) -> BlockTable:
    """Parse KV.PREFIX.BLOCKS' bulk reply ``[u32 block_size][u32 count][count x u64]``."""
    return BlockTable.from_wire(data)
