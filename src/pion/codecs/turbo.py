"""``turbo4`` / ``turbo3`` / ``turbo2``: rotate each 32-group, then Lloyd-Max scalar codes.

The TurboQuant idea: an orthogonal random rotation makes every coordinate of a
group look Gaussian, so one fixed Gaussian codebook quantizes all of them well.

Per 32-element group x (D % 32 == 0):
  1. y = H32 (s * x) / sqrt(32)     s = fixed signs, H32 = Sylvester Walsh-Hadamard
  2. rms = fp16(sqrt(mean(x^2)))    (= RMS of y: the rotation is orthogonal)
  3. code_i = index of the codebook level nearest y_i / rms (ties go to the lower level)
Decoding inverts it exactly: y_hat = level[code] * rms, x_hat = s * (H32 y_hat) / sqrt(32).

Signs: ``SIGN_MASK = 0x11ab702f`` (bit i set = coordinate i negated), drawn once as
``np.random.default_rng(1974).integers(0, 2, 32)``; the same 32 signs for every group.
Codebooks: Lloyd-Max (minimum-MSE) levels for N(0, 1), symmetric, listed below by
their positive half; ``benchmarks/lloyd_max_codebooks.py`` recomputes them and
``tests/codecs/test_turbo_constants.py`` checks these constants against it.
  4 bits: +/-(0.128395030, 0.388048299, 0.656759119, 0.942340456,
              1.256231197, 1.618046386, 2.069017227, 2.732589571)   Gaussian MSE 0.009501
  3 bits: +/-(0.245094179, 0.756005281, 1.343909279, 2.151945705)   Gaussian MSE 0.034548
  2 bits: +/-(0.452780035, 1.510417608)                             Gaussian MSE 0.117482
Codes are numbered 0..2^b-1 from the most negative level up.

Layout, per row of D values (D*b/8 + D/16 bytes):
  [codes  b bits x D]     little-endian bit stream: code j at bits [b*j, b*j + b) of
                          the packed bytes (b=4: byte k = code 2k | code 2k+1 << 4;
                          b=3: 8 codes per 3 bytes; b=2: 4 codes per byte)
  [rms    fp16 x D/32]    one per group
Sizes at D = 1024: turbo4 576 B, turbo3 448 B, turbo2 320 B (fp16: 2048 B).
An all-zero group has rms 0 and decodes to zeros. NaN/Inf input is refused, and
groups whose RMS exceeds fp16's 65504 are refused.

Worked example, turbo4, D = 32, x = [1, 0, 0, ..., 0]:
  s_0 = -1 (bit 0 of the mask), so y_i = -H[i,0] / sqrt(32) = -0.1767767 for all i
  rms = sqrt(1/32) = 0.1767767 -> fp16 0.1767578 (0x31a8); y_i / rms = -1.000107
  nearest 4-bit level: -0.942340456 = code 4, for all 32 coordinates
  bytes = 44 44 44 44 44 44 44 44 44 44 44 44 44 44 44 44 | a8 31
  decoded x_hat = [0.94224, ~0, ..., ~0] (the other coordinates cancel to ~1e-9)
"""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt

from pion.codecs.base import (
    GROUP_SIZE,
    as_out_dtype,
    blob_rows,
    fp16_params,
    input_rows,
    non_finite_error,
    require_group_dim,
    safe_divisor,
)

SIGN_SEED = 1974
SIGN_MASK = 0x11AB702F

# Positive halves of the Lloyd-Max N(0,1) codebooks (see module docstring for how computed).
LLOYD_MAX_POSITIVE: dict[int, tuple[float, ...]] = {
    2: (0.452780035, 1.510417608),
    3: (0.245094179, 0.756005281, 1.343909279, 2.151945705),
    4: (0.128395030, 0.388048299, 0.656759119, 0.942340456,
        1.256231197, 1.618046386, 2.069017227, 2.732589571),
}


def codebook(bits: int) -> np.ndarray:
    """The 2**bits levels, ascending, as float32 (code k decodes to level k)."""
    half = np.asarray(LLOYD_MAX_POSITIVE[bits], dtype=np.float32)
    return np.concatenate([-half[::-1], half])


@cache
def rotation_matrix() -> np.ndarray:
    """M (float32 [32, 32], orthogonal) with y = M @ x, i.e. M = H32 diag(s) / sqrt(32)."""
    h = np.array([[1.0]])
    while h.shape[0] < GROUP_SIZE:
        h = np.block([[h, h], [h, -h]])
    signs = np.array([-1.0 if SIGN_MASK >> i & 1 else 1.0 for i in range(GROUP_SIZE)])
    matrix: np.ndarray = (h * signs[None, :] / np.sqrt(GROUP_SIZE)).astype(np.float32)
    return matrix


@cache
def _decode_table(bits: int) -> np.ndarray:
    """Four packed codes (4*bits bits) -> their four float32 levels as one 16-byte item.

    One gather then expands four codes: 4 bits index by uint16, 3 bits by each
    12-bit half of a 3-byte word, 2 bits by byte. At most 1 MiB, built once.
    """
    levels = codebook(bits)
    index = np.arange(1 << (4 * bits))
    mask = (1 << bits) - 1
    table = np.empty((index.size, 4), dtype=np.float32)
    for k in range(4):
        table[:, k] = levels[(index >> (bits * k)) & mask]
    return table.view(np.dtype("V16")).reshape(index.size)


class TurboCodec:
    """Rotated Lloyd-Max codes at ``bits`` bits per value with a group-32 fp16 RMS."""

    name = "turbo"
    bits = 4

    def row_bytes(self, kv_dim: int) -> int:
        return kv_dim * self.bits // 8 + kv_dim // 16

    def check_dim(self, kv_dim: int) -> None:
        require_group_dim(kv_dim, self.name)

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        x = input_rows(rows, self)
        n, kv_dim = x.shape
        groups = x.reshape(-1, GROUP_SIZE)
        with np.errstate(over="ignore"):
            mean_sq = np.einsum("ij,ij->i", groups, groups) / np.float32(GROUP_SIZE)
        if not np.isfinite(mean_sq).all() and not np.isfinite(x).all():
            raise non_finite_error(x, self.name)
        rms = fp16_params(np.sqrt(mean_sq), x, self.name, "group RMS")
        z = _rotate(groups, rotation_matrix().T)
        z /= safe_divisor(rms)[:, None]
        codes = _nearest_level(z, self.bits)
        packed_bytes = kv_dim * self.bits // 8
        out = np.empty((n, self.row_bytes(kv_dim)), dtype=np.uint8)
        out[:, :packed_bytes] = _pack(codes.reshape(n, kv_dim), self.bits)
        out[:, packed_bytes:].view("<f2")[:] = rms.reshape(n, kv_dim // GROUP_SIZE)
        return out.tobytes()

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        self.check_dim(kv_dim)
        raw = blob_rows(data, kv_dim, self.row_bytes(kv_dim))
        n = raw.shape[0]
        packed_bytes = kv_dim * self.bits // 8
        rms = raw[:, packed_bytes:].view("<f2").astype(np.float32).reshape(-1, 1)
        levels = _unpack_levels(raw[:, :packed_bytes], self.bits, kv_dim).reshape(-1, GROUP_SIZE)
        out = _rotate(levels, rotation_matrix())
        out *= rms
        return as_out_dtype(out.reshape(n, kv_dim), out_dtype)


# OpenBLAS runs a GEMM with m*n*k <= 262144 on the calling thread; bigger ones fan out
# to its thread pool, which stalls 10-40x when other processes share the cores.
_ROWS_PER_GEMM = 256


def _rotate(groups: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """groups [G, 32] @ matrix [32, 32] in single-threaded 256-row GEMMs."""
    out = np.empty(groups.shape, dtype=np.float32)
    for start in range(0, groups.shape[0], _ROWS_PER_GEMM):
        stop = start + _ROWS_PER_GEMM
        np.matmul(groups[start:stop], matrix, out=out[start:stop])
    return out


# Grid for _nearest_level: 1/16-wide bins over [-6, 6] (|z| <= sqrt(32) always).
_GRID_PER_UNIT = 16
_GRID_HALF_WIDTH = 6
_GRID_SLACK = 1e-4


@cache
def _level_grid(bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(first-guess code per grid bin, decision boundaries padded with +Inf).

    A bin's guess counts the boundaries below its left edge (minus a slack that
    covers float rounding of the bin index); bins are narrower than the gap
    between boundaries, so one "z > next boundary" check finishes the job.
    """
    levels = codebook(bits).astype(np.float64)
    bounds = (levels[1:] + levels[:-1]) / 2
    n_bins = 2 * _GRID_HALF_WIDTH * _GRID_PER_UNIT + 1
    left_edges = np.arange(n_bins) / _GRID_PER_UNIT - _GRID_HALF_WIDTH
    guess = np.searchsorted(bounds, left_edges - _GRID_SLACK, side="left").astype(np.uint8)
    return guess, np.append(bounds, np.inf).astype(np.float32)


def _nearest_level(z: np.ndarray, bits: int) -> np.ndarray:
    """uint8 index of the nearest codebook level for each z (ties to the lower level).

    Equal to ``searchsorted(boundaries, z)`` but ~3x faster: a grid lookup plus one check.
    """
    guess, bounds = _level_grid(bits)
    pos = z * np.float32(_GRID_PER_UNIT)
    pos += np.float32(_GRID_HALF_WIDTH * _GRID_PER_UNIT)
    np.clip(pos, 0, guess.size - 1, out=pos)
    codes = guess[pos.astype(np.intp)]
    codes += z > bounds[codes]
    return codes


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes [n, D] -> packed bytes [n, D*bits/8], little-endian bit order."""
    n, kv_dim = codes.shape
    if bits == 3:
        eights = codes.reshape(n, kv_dim // 8, 8).astype(np.uint32)
        word = np.zeros((n, kv_dim // 8), dtype="<u4")
        for k in range(8):
            word |= eights[:, :, k] << (3 * k)
        return word.view(np.uint8).reshape(n, kv_dim // 8, 4)[:, :, :3].reshape(n, kv_dim * 3 // 8)
    per_byte = 8 // bits
    chunks = codes.reshape(n, kv_dim // per_byte, per_byte)
    packed = chunks[:, :, 0].copy()
    for k in range(1, per_byte):
        packed |= chunks[:, :, k] << (bits * k)
    return packed


def _unpack_levels(packed: np.ndarray, bits: int, kv_dim: int) -> np.ndarray:
    """Packed bytes [n, D*bits/8] -> float32 codebook levels [n, D] with table gathers."""
    n = packed.shape[0]
    table = _decode_table(bits)
    if bits == 3:
        triples = packed.reshape(n, kv_dim // 8, 3)
        word = triples[:, :, 0].astype(np.uint32)
        word |= triples[:, :, 1].astype(np.uint32) << 8
        word |= triples[:, :, 2].astype(np.uint32) << 16
        index = np.empty(word.shape + (2,), dtype=np.uint16)
        np.bitwise_and(word, 0xFFF, out=index[:, :, 0], casting="unsafe")
        np.right_shift(word, 12, out=index[:, :, 1], casting="unsafe")
    else:
        index = packed.view("<u2") if bits == 4 else packed
    levels: np.ndarray = table[index].view(np.float32).reshape(n, kv_dim)
    return levels


class Turbo4Codec(TurboCodec):
    """4-bit rotated Lloyd-Max: 3.6x smaller than fp16 at D = 1024."""

    name = "turbo4"
    bits = 4


class Turbo3Codec(TurboCodec):
    """3-bit rotated Lloyd-Max: 4.6x smaller than fp16 at D = 1024."""

    name = "turbo3"
    bits = 3


class Turbo2Codec(TurboCodec):
    """2-bit rotated Lloyd-Max: 6.4x smaller than fp16 at D = 1024."""

    name = "turbo2"
    bits = 2
