"""The codec contract: how one storage format turns float rows into bytes and back.

A row is one token's ``kv_dim`` values for one layer (the [N, H*D] layout of docs/formats.md).
Codecs are stateless and vectorized over all rows of a batch at once. Every
format is a fixed number of bytes per row, so a blob of n rows is exactly
``n * row_bytes(kv_dim)`` bytes and rows can be sliced without decoding.

The helpers below are the input checks every format shares, so that all of
them refuse bad input with the same wording.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from pion.common.errors import CodecError

GROUP_SIZE = 32
"""Elements per scale group for the group-wise formats (fp8, turbo*, mlx4g32)."""

FP16_MAX = 65504.0


@runtime_checkable
class Codec(Protocol):
    """One storage format.

    ``encode`` is called by the server on every V.STOREBATCH (and by clients that
    encode locally); ``decode`` on every V.FETCH that is not ``DTYPE raw``.
    Both raise ``pion.common.errors.CodecError`` on bad input and never return
    partial results.
    """

    name: str

    def row_bytes(self, kv_dim: int) -> int:
        """Exact encoded size of one row."""
        ...

    def check_dim(self, kv_dim: int) -> None:
        """Raise CodecError if this format cannot store rows of ``kv_dim`` values."""
        ...

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        """Encode float32 rows of shape [n, kv_dim] into n * row_bytes(kv_dim) bytes."""
        ...

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        """Decode n * row_bytes(kv_dim) bytes into an [n, kv_dim] array of ``out_dtype``."""
        ...


def require_positive_dim(kv_dim: int) -> None:
    """CodecError unless ``kv_dim`` is a positive integer."""
    if not isinstance(kv_dim, (int, np.integer)) or isinstance(kv_dim, bool) or kv_dim <= 0:
        raise CodecError(f"kv_dim must be a positive integer, got {kv_dim!r}")


def require_group_dim(kv_dim: int, fmt: str) -> None:
    """CodecError unless ``kv_dim`` splits into whole 32-element groups (wire wording is fixed)."""
    require_positive_dim(kv_dim)
    if kv_dim % GROUP_SIZE:
        raise CodecError(f"kv_dim must be a multiple of {GROUP_SIZE} for {fmt}")


def input_rows(rows: npt.ArrayLike, codec: Codec) -> np.ndarray:
    """The caller's rows as a C-contiguous float32 [n, kv_dim] array, dim checked."""
    arr = np.ascontiguousarray(rows, dtype=np.float32)
    if arr.ndim != 2:
        raise CodecError(f"rows must be a 2-D [n, kv_dim] array, got shape {arr.shape}")
    codec.check_dim(arr.shape[1])
    return arr


def non_finite_error(rows: np.ndarray, fmt: str) -> CodecError:
    """The refusal for a batch holding NaN or Inf; names the first bad row."""
    bad = np.flatnonzero(~np.isfinite(rows).all(axis=1))
    where = f"row {int(bad[0])}" if bad.size else "the batch"
    return CodecError(f"{fmt} cannot store NaN or Inf (found in {where}); nothing was stored")


def fp16_params(values: np.ndarray, rows: np.ndarray, fmt: str, what: str) -> np.ndarray:
    """Round per-row/per-group parameters through fp16, as the reader will see them.

    Returns float32 values that are exactly representable in fp16. A parameter
    that would overflow fp16 means the input is out of range for the format.
    """
    with np.errstate(over="ignore"):
        rounded = values.astype(np.float16)
    if not np.isfinite(rounded).all():
        if not np.isfinite(rows).all():
            raise non_finite_error(rows, fmt)
        raise CodecError(f"values too large for {fmt}: a {what} exceeds fp16's range (+/-{FP16_MAX:g})")
    return rounded.astype(np.float32)


def safe_divisor(scale: np.ndarray) -> np.ndarray:
    """``scale`` with zeros replaced by +Inf, so x / divisor is 0 for an all-zero group."""
    return np.where(scale > 0, scale, np.float32(np.inf))


def blob_rows(data: bytes | memoryview, kv_dim: int, row_bytes: int) -> np.ndarray:
    """The blob as a read-only uint8 [n, row_bytes] view; CodecError on a partial row."""
    size = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
    if size % row_bytes:
        raise CodecError(
            f"blob of {size} bytes is not a whole number of {row_bytes}-byte rows (kv_dim {kv_dim})")
    return np.frombuffer(data, dtype=np.uint8).reshape(-1, row_bytes)


def as_out_dtype(values: np.ndarray, out_dtype: npt.DTypeLike) -> np.ndarray:
    """Decoded float32 values in the caller's dtype (no copy when already float32)."""
    return values.astype(out_dtype, copy=False)


def require_multiple(kv_dim: int, multiple: int, fmt: str) -> None:
    """CodecError unless ``kv_dim`` is a positive multiple of ``multiple`` (same wording as 32-groups)."""
    require_positive_dim(kv_dim)
    if kv_dim % multiple:
        raise CodecError(f"kv_dim must be a multiple of {multiple} for {fmt}")


def token_group(codec: Codec) -> int:
    """Rows that are encoded together (1 for the per-row formats).

    A format with ``token_group`` G > 1 (the kivi K formats) shares parameters across G
    consecutive rows counted from the layer's first row: its rows can be stored and decoded
    only in runs that start at a multiple of G (see pion.server.store.token_groups).
    """
    group = getattr(codec, "token_group", 1)
    return group if isinstance(group, int) and group > 0 else 1
