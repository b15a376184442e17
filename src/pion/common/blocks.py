"""The block-hash table of a prefix and its wire forms: one ``BlockTable`` for client and server.

A table is ``block_size`` plus the chained u64 hashes of the prefix's full blocks in token order
(how they are computed: ``pion.client.block_hashes``). Wire forms, all little-endian:

* hashes blob (``KV.PREFIX.REGISTER … BLOCKS <size> <count> <blob>``, ``KV.PREFIX.MEMBERSHIP``
  probes): ``count x u64``.
* ``KV.PREFIX.BLOCKS`` reply: ``[u32 block_size][u32 count][count x u64]``.
  Example: block_size 64, hashes [1, 2] ->
  ``40 00 00 00 | 02 00 00 00 | 01 00.. (8 bytes) | 02 00.. (8 bytes)`` (24 bytes).
* ``KV.PREFIX.MEMBERSHIP`` reply: ceil(K/8) bytes for K probes; probe i is bit ``i % 8`` (LSB
  first) of byte ``i // 8``. Example: table {1, 2}, probes [2, 9, 1] -> bits 1,0,1 -> ``0x05``.

Server-side membership probes search a sorted copy (O(K log N)), built on first use.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pion.common.ids import BlockHash

_HEADER = struct.Struct("<II")


def pack_hashes(hashes: Sequence[int]) -> bytes:
    """u64 little-endian concatenation."""
    return struct.pack(f"<{len(hashes)}Q", *hashes)


@dataclass(frozen=True)
class BlockTable:
    """The block hash table of one prefix."""

    block_size: int
    hashes: tuple[BlockHash, ...]

    @classmethod
    def from_blob(cls, block_size: int, blob: bytes) -> BlockTable:
        """From ``count x u64`` little-endian hashes (REGISTER's BLOCKS argument)."""
        if len(blob) % 8:
            raise ValueError(f"a block-hash blob is whole u64s; got {len(blob)} bytes")
        return cls(block_size, tuple(BlockHash(int(h)) for h in np.frombuffer(blob, dtype="<u8")))

    @classmethod
    def from_wire(cls, data: bytes) -> BlockTable:
        """Parse KV.PREFIX.BLOCKS' reply ``[u32 block_size][u32 count][count x u64]``."""
        if len(data) < _HEADER.size:
            raise ValueError(f"KV.PREFIX.BLOCKS reply of {len(data)} bytes is shorter than its 8-byte header")
        block_size, count = _HEADER.unpack_from(data, 0)
        if len(data) != _HEADER.size + 8 * count:
            raise ValueError(f"KV.PREFIX.BLOCKS reply says {count} hashes but carries {len(data) - 8} bytes")
        return cls(block_size, tuple(BlockHash(h) for h in struct.unpack_from(f"<{count}Q", data, 8)))

    def blob(self) -> bytes:
        """Little-endian u64 hashes, as KV.PREFIX.REGISTER's BLOCKS clause and MEMBERSHIP take them."""
        return pack_hashes(self.hashes)

    def wire(self) -> bytes:
        """KV.PREFIX.BLOCKS' reply: ``[u32 block_size][u32 count][u64 hashes]``."""
        return _HEADER.pack(self.block_size, len(self.hashes)) + self.blob()

    @cached_property
    def _sorted(self) -> np.ndarray:
        return np.sort(np.asarray(self.hashes, dtype=np.uint64))

    def membership(self, probe_blob: bytes) -> bytes:
        """KV.PREFIX.MEMBERSHIP's bitmap for ``count x u64`` probes: bit i set iff probe i is in the table."""
        probes = np.frombuffer(probe_blob, dtype="<u8")
        table = self._sorted
        if len(table) == 0 or len(probes) == 0:
            found = np.zeros(len(probes), dtype=bool)
        else:
            idx = np.minimum(np.searchsorted(table, probes), len(table) - 1)
            found = table[idx] == probes
        return np.packbits(found, bitorder="little").tobytes()


def unpack_bitmap(bitmap: bytes, count: int) -> list[bool]:
    """KV.PREFIX.MEMBERSHIP's bitmap as one bool per probe."""
    if len(bitmap) != (count + 7) // 8:
        raise ValueError(f"membership bitmap of {len(bitmap)} bytes does not cover {count} probes")
    return [bool(bitmap[i >> 3] >> (i & 7) & 1) for i in range(count)]
