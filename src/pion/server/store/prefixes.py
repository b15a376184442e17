"""KV prefix registrations: which namespaces are registered, their block tables, receipt data.

A prefix ``ns`` is two V-store sessions, ``<ns>_pk`` (keys) and ``<ns>_pv``
(values). The entry here carries what REGISTER said beyond the sessions: the
optional block-hash table (for cache-aware routers), the optional layer count
that gates LOOKUP, and the optional measured cold prefill time credited on hits.

Block table wire layout (KV.PREFIX.BLOCKS reply), all little-endian:
  [u32 block_size][u32 block_count][block_count x u64 hash, in token order]
Example: block_size 64, hashes [1, 2] ->
  40 00 00 00 | 02 00 00 00 | 01 00.. (8 bytes) | 02 00.. (8 bytes)   (24 bytes)

Membership bitmap (KV.PREFIX.MEMBERSHIP reply): ceil(K/8) bytes for K probes; probe i
is bit ``i % 8`` (LSB first) of byte ``i // 8``. Example: table {1, 2}, probes
[2, 9, 1] -> bits 1,0,1 -> one byte 0x05.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from pion.common.ids import Namespace

_HEADER = struct.Struct("<II")


class BlockTable:
    """Block hashes in token order plus a sorted copy for O(K log N) membership probes."""

    __slots__ = ("block_size", "hashes", "_sorted")

    def __init__(self, block_size: int, hash_blob: bytes) -> None:
        self.block_size = block_size
        self.hashes = np.frombuffer(bytes(hash_blob), dtype="<u8")
        self._sorted = np.sort(self.hashes)

    @property
    def blob(self) -> bytes:
        return self.hashes.tobytes()

    def wire(self) -> bytes:
        """``[u32 block_size][u32 block_count][u64 hashes]``, little-endian."""
        return _HEADER.pack(self.block_size, len(self.hashes)) + self.hashes.tobytes()

    def membership(self, probe_blob: bytes) -> bytes:
        """ceil(K/8)-byte bitmap; bit i (LSB-first per byte) set iff probe i is in the table."""
        probes = np.frombuffer(probe_blob, dtype="<u8")
        if len(self._sorted) == 0 or len(probes) == 0:
            found = np.zeros(len(probes), dtype=bool)
        else:
            idx = np.searchsorted(self._sorted, probes)
            np.minimum(idx, len(self._sorted) - 1, out=idx)
            found = self._sorted[idx] == probes
        return np.packbits(found, bitorder="little").tobytes()


@dataclass
class PrefixEntry:
    """What KV.PREFIX.REGISTER recorded for one namespace."""

    ns: Namespace
    kv_dim: int
    k_formats: tuple[str, ...]
    v_formats: tuple[str, ...]
    uniform: bool
    blocks: BlockTable | None = None
    layers: int | None = None
    prefill_ms: float | None = None
