"""Lossless-ish float formats: ``fp32`` and ``fp16``.

Layout, per row of D values:
  fp32: D little-endian IEEE float32 (4*D bytes), bit-exact.
  fp16: D little-endian IEEE binary16 (2*D bytes); finite values beyond +/-65504
        saturate to +/-65504, NaN and +/-Inf are stored as themselves.

Worked example, D = 2, row [1.0, -70000.0]:
  fp32 -> 00 00 80 3f | 60 b8 88 c7
  fp16 -> 00 3c | ff fb          (-70000 saturates to -65504 = 0xfbff)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pion.codecs.base import FP16_MAX, as_out_dtype, blob_rows, input_rows, require_positive_dim

__all__ = ["FP16_MAX", "Float16Codec", "Float32Codec"]


class Float32Codec:
    """Lossless reference format."""

    name = "fp32"

    def row_bytes(self, kv_dim: int) -> int:
        return 4 * kv_dim

    def check_dim(self, kv_dim: int) -> None:
        require_positive_dim(kv_dim)

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        return input_rows(rows, self).astype("<f4", copy=False).tobytes()

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        self.check_dim(kv_dim)
        raw = blob_rows(data, kv_dim, self.row_bytes(kv_dim))
        return as_out_dtype(raw.view("<f4"), out_dtype)


class Float16Codec:
    """IEEE half precision; the production default."""

    name = "fp16"

    def row_bytes(self, kv_dim: int) -> int:
        return 2 * kv_dim

    def check_dim(self, kv_dim: int) -> None:
        require_positive_dim(kv_dim)

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        rows32 = input_rows(rows, self)
        with np.errstate(over="ignore"):
            half = rows32.astype("<f2")
        overflowed = np.isinf(half)
        if overflowed.any():
            # only finite overflow saturates; +/-Inf input stays Inf (NaN is kept by the cast)
            overflowed &= np.isfinite(rows32)
            half[overflowed] = np.copysign(FP16_MAX, rows32[overflowed])
        return half.tobytes()

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        self.check_dim(kv_dim)
        raw = blob_rows(data, kv_dim, self.row_bytes(kv_dim))
        return as_out_dtype(raw.view("<f2"), out_dtype)
