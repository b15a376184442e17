"""``mlx4g32``: 4-bit affine codes in groups of 32, MLX ``QuantizedKVCache`` layout.

Layout, per row of D values (D/2 + D/8 bytes, D % 32 == 0; 640 B at D = 1024):
  [packed  uint32 x D/8]    little-endian; element j of a group at bits 4*(j % 8)
                            of word j // 8, i.e. byte k holds elements 2k (low
                            nibble) and 2k+1 (high nibble)
  [scales  fp16   x D/32]   scale_g = fp16((max_g - min_g) / 15)
  [biases  fp16   x D/32]   bias_g  = fp16(min_g)

Both parameters are rounded to fp16 *before* the codes are chosen:
code_i = clip(round_half_even((x_i - bias_g) / scale_g), 0, 15), and decoding is
``code_i * scale_g + bias_g`` -- exactly what ``mx.dequantize(w, scales, biases,
group_size=32, bits=4)`` computes, so K/V stored here load straight into MLX.
A constant group has scale 0 and decodes to its (fp16) value. Error bound per
element: |x - x_hat| <= scale/2 + |min - bias| + 15 * |(max - min)/15 - scale|
(the last two terms are fp16 rounding). NaN/Inf input is refused.

Worked example, D = 32, x_i = i / 10 for i = 0..31 (0.0, 0.1, ..., 3.1):
  min = 0, max = 3.1, 3.1/15 = 0.206667 -> fp16 0.206665 (0x329d); bias 0 (0x0000)
  codes = round([0, 0.484, 0.968, 1.45, 1.94, 2.42, ...]) = [0, 0, 1, 1, 2, 2, ...]
  word 0 = codes 0..7 = [0,0,1,1,2,2,3,3] -> 0x33221100 -> bytes 00 11 22 33
  bytes = 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff | 9d 32 | 00 00
  decoded x_hat_3 = 1 * 0.206665 + 0 = 0.206665 (x_3 = 0.3)
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

LEVELS = 15  # 4 bits: codes 0..15


@cache
def nibble_table() -> np.ndarray:
    """byte -> (low nibble, high nibble) as two float32 codes packed in one uint64."""
    pairs = np.empty((256, 2), dtype=np.float32)
    index = np.arange(256)
    pairs[:, 0] = index & 0xF
    pairs[:, 1] = index >> 4
    return pairs.view(np.uint64).reshape(256)


class Mlx4Group32Codec:
    """int4 group-32 affine (scale + bias per group): 3.2x smaller than fp16, MLX-compatible."""

    name = "mlx4g32"

    def row_bytes(self, kv_dim: int) -> int:
        return kv_dim // 2 + kv_dim // 8

    def check_dim(self, kv_dim: int) -> None:
        require_group_dim(kv_dim, self.name)

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        x = input_rows(rows, self)
        n, kv_dim = x.shape
        n_groups = kv_dim // GROUP_SIZE
        groups = x.reshape(n, n_groups, GROUP_SIZE)
        lo = np.min(groups, axis=2)
        hi = np.max(groups, axis=2)
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise non_finite_error(x, self.name)
        with np.errstate(over="ignore"):
            span = (hi - lo) / np.float32(LEVELS)
        scale = fp16_params(span, x, self.name, "group scale")
        bias = fp16_params(lo, x, self.name, "group bias")
        q = np.subtract(groups, bias[:, :, None])
        np.divide(q, safe_divisor(scale)[:, :, None], out=q)
        np.rint(q, out=q)
        np.clip(q, 0, LEVELS, out=q)
        codes = q.reshape(n, kv_dim).astype(np.uint8)
        out = np.empty((n, self.row_bytes(kv_dim)), dtype=np.uint8)
        packed_bytes = kv_dim // 2
        np.bitwise_or(codes[:, 0::2], codes[:, 1::2] << 4, out=out[:, :packed_bytes])
        params = out[:, packed_bytes:].view("<f2")
        params[:, :n_groups] = scale
        params[:, n_groups:] = bias
        return out.tobytes()

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        self.check_dim(kv_dim)
        raw = blob_rows(data, kv_dim, self.row_bytes(kv_dim))
        n = raw.shape[0]
        n_groups = kv_dim // GROUP_SIZE
        packed_bytes = kv_dim // 2
        params = raw[:, packed_bytes:].view("<f2").astype(np.float32)
        out = nibble_table()[raw[:, :packed_bytes]].view(np.float32)
        groups = out.reshape(n, n_groups, GROUP_SIZE)
        groups *= params[:, :n_groups, None]
        groups += params[:, n_groups:, None]
        return as_out_dtype(out.reshape(n, kv_dim), out_dtype)


def pack_mlx_triplet(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray) -> bytes:
    """Lay out ``mx.quantize(w, group_size=32, bits=4)`` outputs as mlx4g32 rows.

    ``packed`` is uint32 [n, D/8]; ``scales``/``biases`` are [n, D/32] (converted to
    fp16). This is how a client hands MLX-quantized K/V to Pion with DTYPE raw.
    """
    n = packed.shape[0]
    out = np.empty((n, packed.shape[1] * 4 + scales.shape[1] * 4), dtype=np.uint8)
    words = packed.shape[1] * 4
    out[:, :words] = np.ascontiguousarray(packed, dtype="<u4").view(np.uint8)
    params = out[:, words:].view("<f2")
    params[:, : scales.shape[1]] = scales
    params[:, scales.shape[1]:] = biases
    return out.tobytes()
