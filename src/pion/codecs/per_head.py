"""``int8h64`` / ``int8h128`` / ``fp8h64`` / ``fp8h128``: int8 and fp8 with one scale per KV head.

Why: a row of K/V is H heads of head_dim values, concatenated. ``int8`` shares one scale across
the whole row, so the head with the largest values sets every head's step; these formats give
each head (each run of head_dim = 64 or 128 values) its own scale, to measure how much of
int8's loss comes from that sharing. (``fp8`` already scales per 32 values; ``fp8h*`` is the
coarser per-head variant, for the same comparison.)

Layout, per row of D values, h = 64 or 128 (D + 2*D/h bytes; D % h == 0):
  [codes   int8 (or e4m3fn) x D]
  [scales  fp16 x D/h]          scale_k = fp16(amax_k / 127)   (fp8: / 448), head k = values h*k .. h*k+h-1
int8: code = clip(round_half_even(x / scale_k), -127, 127), x_hat = code * scale_k.
fp8:  code = e4m3fn(clip(x / scale_k, -448, 448)) (round to nearest even), x_hat = float(code) * scale_k.
Scales are rounded to fp16 before the codes are chosen; an all-zero head has scale 0.
Error bounds as for int8 / fp8 with the head's scale (docs/formats.md). NaN/Inf is refused.

Worked example, int8h64, D = 128, head 0 = [0.5, -1.0, 0.25, 0, 0 ...], head 1 = [100, 0, 0 ...]:
  head 0: amax 1.0 -> scale fp16(1/127) = 0.007873535 (0x2008), codes 64, -127, 32, 0 ...
  head 1: amax 100 -> scale fp16(100/127) = 0.787598 (0x3a4d), codes 127, 0 ...
  bytes = 40 81 20 00 ... (64 codes) 7f 00 ... (64 codes) | 08 20 | 4d 3a
  (with int8's one row scale 0.787598, head 0 would decode to [0.787598, -0.787598, 0, 0 ...]).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

from pion.codecs.base import (
    as_out_dtype,
    blob_rows,
    fp16_params,
    input_rows,
    non_finite_error,
    require_multiple,
    safe_divisor,
)
from pion.codecs.fp8 import E4M3_MAX
from pion.codecs.fp8 import _pair_table as fp8_pair_table
from pion.codecs.int8 import INT8_MAX


def scaled_heads(x: npt.NDArray[np.float32], head_dim: int, max_code: float,
                 name: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[n, kv_dim]`` -> (values divided by their head's scale ``[n, heads, head_dim]``, the
    fp16 scales ``[n, heads]``): one symmetric scale per KV head, so the largest magnitude of a
    head maps to ``max_code``. Shared by the 8-bit and the 5/6-bit per-head formats."""
    n, kv_dim = x.shape
    heads = x.reshape(n, kv_dim // head_dim, head_dim)
    amax = np.max(np.abs(heads), axis=2)
    if not np.isfinite(amax).all():
        raise non_finite_error(x, name)
    scale = fp16_params(amax / np.float32(max_code), x, name, "head scale")
    return np.divide(heads, safe_divisor(scale)[:, :, None]), scale


class _PerHeadCodec:
    """Shared layout: D one-byte codes then one fp16 scale per head of ``head_dim`` values."""

    name = "per-head"
    head_dim = 64
    max_code = float(INT8_MAX)

    def row_bytes(self, kv_dim: int) -> int:
        return kv_dim + 2 * (kv_dim // self.head_dim)

    def check_dim(self, kv_dim: int) -> None:
        require_multiple(kv_dim, self.head_dim, self.name)

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        x = input_rows(rows, self)
        n, kv_dim = x.shape
        q, scale = scaled_heads(x, self.head_dim, self.max_code, self.name)
        out = np.empty((n, self.row_bytes(kv_dim)), dtype=np.uint8)
        out[:, :kv_dim] = self._codes(q).reshape(n, kv_dim)
        out[:, kv_dim:].view("<f2")[:] = scale
        return out.tobytes()

    def _codes(self, q: np.ndarray) -> np.ndarray:
        """Scaled values -> one uint8 code each."""
        raise NotImplementedError

    def _values(self, codes: np.ndarray) -> np.ndarray:
        """uint8 codes [n, D] -> float32 values before scaling."""
        raise NotImplementedError

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        self.check_dim(kv_dim)
        raw = blob_rows(data, kv_dim, self.row_bytes(kv_dim))
        n = raw.shape[0]
        scale = raw[:, kv_dim:].view("<f2").astype(np.float32)
        out = self._values(raw[:, :kv_dim])
        heads = out.reshape(n, kv_dim // self.head_dim, self.head_dim)
        heads *= scale[:, :, None]
        return as_out_dtype(out.reshape(n, kv_dim), out_dtype)


class _Int8PerHead(_PerHeadCodec):
    max_code = float(INT8_MAX)

    def _codes(self, q: np.ndarray) -> np.ndarray:
        np.rint(q, out=q)  # round half to even
        np.clip(q, -INT8_MAX, INT8_MAX, out=q)
        return q.astype(np.int8).view(np.uint8)

    def _values(self, codes: np.ndarray) -> np.ndarray:
        return codes.view(np.int8).astype(np.float32)


class _Fp8PerHead(_PerHeadCodec):
    max_code = E4M3_MAX

    def _codes(self, q: np.ndarray) -> np.ndarray:
        np.clip(q, -E4M3_MAX, E4M3_MAX, out=q)
        return q.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)

    def _values(self, codes: np.ndarray) -> np.ndarray:
        # one gather per pair of codes (the fp8 decoder's table)
        pairs = np.ascontiguousarray(codes).view("<u2")
        values: np.ndarray = fp8_pair_table()[pairs].view(np.float32).reshape(codes.shape)
        return values


class Int8H64Codec(_Int8PerHead):
    """int8 with a scale per 64-value head (SmolLM2, Llama-3.2-1B): D + D/32 bytes."""

    name, head_dim = "int8h64", 64


class Int8H128Codec(_Int8PerHead):
    """int8 with a scale per 128-value head (Llama-3-8B, Qwen2.5-7B): D + D/64 bytes."""

    name, head_dim = "int8h128", 128


class Fp8H64Codec(_Fp8PerHead):
    """fp8 e4m3fn with a scale per 64-value head: D + D/32 bytes."""

    name, head_dim = "fp8h64", 64


class Fp8H128Codec(_Fp8PerHead):
    """fp8 e4m3fn with a scale per 128-value head: D + D/64 bytes."""

    name, head_dim = "fp8h128", 128
