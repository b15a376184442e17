"""``int8``: per-row symmetric 8-bit codes with one fp16 scale per row.

Layout, per row of D values (D + 2 bytes, any D >= 1):
  [codes  int8 x D]      code_i = clip(round_half_even(x_i / scale), -127, 127)
  [scale  fp16 x 1]      scale = fp16(amax / 127), amax = max_i |x_i|

The scale is rounded to fp16 *before* the codes are chosen, so the codes fit the
scale the reader will actually multiply by. Decoding is ``code_i * scale``.
An all-zero row has scale 0 and codes 0. Error bound per element:
|x - x_hat| <= scale/2 + 127 * |amax/127 - scale| (the second term is the fp16
rounding of the scale; it is at most scale/16). NaN/Inf input is refused, and
rows whose scale would overflow fp16 (amax > 65504 * 127) are refused.

Worked example, D = 4, row [0.5, -1.0, 0.25, 0.0]:
  amax = 1.0, amax/127 = 0.007874016 -> fp16 0.007873535 (0x2008)
  codes = round([63.504, -127.008, 31.752, 0]) = [64, -127, 32, 0]
          (-127.008 rounds to -127 and is within the clip)
  bytes = 40 81 20 00 | 08 20
  decoded = [0.503906, -0.999939, 0.251953, 0.0]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pion.codecs.base import (
    as_out_dtype,
    blob_rows,
    fp16_params,
    input_rows,
    non_finite_error,
    require_positive_dim,
    safe_divisor,
)

INT8_MAX = 127


class Int8RowCodec:
    """Symmetric int8 with a per-row fp16 scale: 2x smaller than fp16, for single-step work."""

    name = "int8"

    def row_bytes(self, kv_dim: int) -> int:
        return kv_dim + 2

    def check_dim(self, kv_dim: int) -> None:
        require_positive_dim(kv_dim)

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        x = input_rows(rows, self)
        n, kv_dim = x.shape
        amax = np.max(np.abs(x), axis=1, initial=0.0)
        if not np.isfinite(amax).all():
            raise non_finite_error(x, self.name)
        scale = fp16_params(amax / np.float32(INT8_MAX), x, self.name, "row scale")
        q = np.divide(x, safe_divisor(scale)[:, None])
        np.rint(q, out=q)  # round half to even
        np.clip(q, -INT8_MAX, INT8_MAX, out=q)
        out = np.empty((n, self.row_bytes(kv_dim)), dtype=np.uint8)
        out[:, :kv_dim] = q.astype(np.int8).view(np.uint8)
        out[:, kv_dim:].view("<f2")[:, 0] = scale
        return out.tobytes()

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        self.check_dim(kv_dim)
        raw = blob_rows(data, kv_dim, self.row_bytes(kv_dim))
        codes = raw[:, :kv_dim].view(np.int8)
        scale = raw[:, kv_dim:].view("<f2").astype(np.float32)
        out = np.empty((raw.shape[0], kv_dim), dtype=np.float32)
        np.multiply(codes, scale, out=out, dtype=np.float32)
        return as_out_dtype(out, out_dtype)
