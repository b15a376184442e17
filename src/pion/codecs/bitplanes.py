"""5- and 6-bit codes stored as two bit planes: a 4-bit low plane and a (b - 4)-bit high plane.

Why: 6 bits a value is 4 values in 3 bytes, 5 bits is 8 values in 5 bytes; packing them as one
bit stream would need shifts across byte boundaries on decode. Splitting each code into its low
nibble and its high bits keeps the same byte count (D/2 + D(b-4)/8 bytes for D codes) and lets
the decoder do what the 4-bit formats already do fast: one table gather per plane (a byte ->
two float32 nibbles; a byte -> 8/(b-4) float32 high parts, already times 16) and one add.

Plane layout for D unsigned codes of b bits (D % 8 == 0):
  low plane   D/2 bytes:        byte k = (code 2k & 15) | (code 2k+1 & 15) << 4   (mlx4g32's nibbles)
  high plane  D*(b-4)/8 bytes:  h = b - 4 bits per code, 8/h codes per byte;
                                byte m holds (code >> 4) of codes m*8/h + i at bits h*i .. h*i + h - 1
Example, b = 6, codes [5, 63, 16, 33]: low = 05 | f0 -> byte 0xf5, 0x10 | 1 << 4 -> 0x10;
high parts [0, 3, 1, 2] -> 0 | 3 << 2 | 1 << 4 | 2 << 6 = 0x9c; planes = f5 10 | 9c.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from pion.codecs.mlx4g32 import nibble_table

PLANE_BITS = (5, 6)


def plane_bytes(kv_dim: int, bits: int) -> int:
    """Bytes of both planes for ``kv_dim`` codes of ``bits`` (5 or 6) bits."""
    return kv_dim // 2 + kv_dim * (bits - 4) // 8


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned codes uint8 [n, D] (each < 2**bits) -> uint8 [n, plane_bytes(D, bits)]."""
    n, kv_dim = codes.shape
    high_bits = bits - 4
    per_byte = 8 // high_bits
    out = np.empty((n, plane_bytes(kv_dim, bits)), dtype=np.uint8)
    low = codes & 0xF
    np.bitwise_or(low[:, 0::2], low[:, 1::2] << 4, out=out[:, : kv_dim // 2])
    high = (codes >> 4).reshape(n, kv_dim // per_byte, per_byte)
    packed = np.zeros((n, kv_dim // per_byte), dtype=np.uint8)
    for i in range(per_byte):
        packed |= high[:, :, i] << (high_bits * i)
    out[:, kv_dim // 2:] = packed
    return out


@cache
def high_table(bits: int) -> np.ndarray:
    """byte of the high plane -> its 8/(bits-4) high parts as float32 values times 16.

    Shaped [256] of a dtype exactly that wide (complex128 for 4 values, a 32-byte void for 8) so
    that one gather copies a whole byte's values at once.
    """
    high_bits = bits - 4
    per_byte = 8 // high_bits
    index = np.arange(256)
    values = np.empty((256, per_byte), dtype=np.float32)
    for i in range(per_byte):
        values[:, i] = ((index >> (high_bits * i)) & ((1 << high_bits) - 1)) * 16
    if per_byte == 4:
        return values.view(np.complex128).reshape(256)
    return values.view(np.dtype((np.void, 4 * per_byte))).reshape(256)


def unpack(planes: np.ndarray, kv_dim: int, bits: int) -> np.ndarray:
    """uint8 [n, plane_bytes(D, bits)] -> the unsigned codes as a new float32 [n, D] array."""
    n = planes.shape[0]
    low_pairs: np.ndarray = nibble_table()[planes[:, : kv_dim // 2]]
    out = low_pairs.view(np.float32).reshape(n, kv_dim)
    high: np.ndarray = high_table(bits)[planes[:, kv_dim // 2:]]
    out += high.view(np.float32).reshape(n, kv_dim)
    return out
