"""Argument parsing for ATTEND.PREFIX.*: shapes, float blobs, head maps, index lists, fa_window.

Every parser raises ``CommandError`` naming what is wrong before anything is stored or computed.
Blobs are little-endian: floats fp32 (``DTYPE f16`` accepted for STORE), head maps and sparse
indices/counts u32. Tensors are built here (torch is imported lazily by the family module).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pion.common.errors import CommandError
from pion.server.commands.store_args import parse_int
from pion.server.store.session import MAX_LAYERS

MAX_HEADS = 4096
MAX_HEAD_DIM = 4096
MAX_TOKENS = 1 << 24
MAX_QUERY_ROWS = 1 << 16
FLOAT_DTYPES = {"f32": "<f4", "f16": "<f2"}


def parse_layer(arg: bytes) -> int:
    return parse_int(arg, "layer", 0, MAX_LAYERS - 1)


def parse_heads(arg: bytes, what: str = "H") -> int:
    return parse_int(arg, what, 1, MAX_HEADS)


def parse_head_dim(arg: bytes) -> int:
    return parse_int(arg, "D", 1, MAX_HEAD_DIM)


def parse_window(args: list[bytes], i: int) -> int | None:
    """The optional trailing ``fa_window`` at ``args[i]``; -ERR for anything after it."""
    if len(args) <= i:
        return None
    if len(args) > i + 1:
        raise CommandError(f"too many arguments: expected at most {i + 1} after the command name")
    return parse_int(args[i], "fa_window", 1, MAX_TOKENS)


def float_tensor(blob: bytes, what: str, count: int | None, dtype: str = "f32") -> Any:
    """A finite fp32 torch tensor from a little-endian float blob (exactly ``count`` values if given)."""
    import torch

    width = 2 if dtype == "f16" else 4
    if len(blob) % width or (count is not None and len(blob) != count * width):
        expected = f"{count} x {width}" if count is not None else f"a multiple of {width}"
        raise CommandError(f"{what} is {len(blob)} bytes, expected {expected} bytes ({dtype})")
    values = np.frombuffer(blob, dtype=FLOAT_DTYPES[dtype])
    if not np.isfinite(values).all():
        raise CommandError(f"{what} holds NaN or Inf")
    return torch.from_numpy(values.astype(np.float32))  # astype copies: the tensor owns its memory


def query_tensor(blob: bytes, h: int, d: int, what: str = "Q") -> Any:
    """Q ``[H, M, D]`` fp32 with M from the blob length (1..65536)."""
    row = h * d * 4
    if len(blob) == 0 or len(blob) % row:
        raise CommandError(f"{what} is {len(blob)} bytes, not a whole number of H x D x 4 = {row}-byte rows")
    m = len(blob) // row
    if m > MAX_QUERY_ROWS:
        raise CommandError(f"{what} has {m} query rows, at most {MAX_QUERY_ROWS} are allowed")
    return float_tensor(blob, what, None).view(h, m, d)


def suffix_tensor(blob: bytes, h_kv: int, s: int, d: int, what: str) -> Any:
    """A suffix K or V ``[H_kv, S, D]`` fp32 (exactly that many values)."""
    return float_tensor(blob, what, h_kv * s * d).view(h_kv, s, d)


def u32_array(blob: bytes, what: str, count: int) -> np.ndarray:
    if len(blob) != 4 * count:
        raise CommandError(f"{what} is {len(blob)} bytes, expected {count} x 4 (u32)")
    return np.frombuffer(blob, dtype="<u4")


def head_map_tensor(blob: bytes, h_q: int, h_kv: int) -> Any:
    """``head_map``: H_q u32 kv-head indices, or empty for the standard grouping (-> None)."""
    import torch

    if len(blob) == 0:
        if h_q % h_kv:
            raise CommandError(f"an empty head_map needs H_kv {h_kv} to divide H_q {h_q}")
        return None
    values = u32_array(blob, "head_map", h_q)
    if int(values.max()) >= h_kv:
        raise CommandError(f"head_map entry {int(values.max())} is out of range for H_kv {h_kv}")
    if h_q % h_kv == 0 and np.array_equal(values, np.arange(h_q) // (h_q // h_kv)):
        return None  # the standard grouping: the kernel's native GQA path
    return torch.from_numpy(values.astype(np.int64))


def sparse_lists(indices_blob: bytes, counts_blob: bytes, h: int, k_max: int, n: int) -> tuple[Any, Any]:
    """QUERY_SPARSE's ``indices`` (H x K_sparse_max u32) and ``counts`` (H u32, each 1..K_sparse_max)."""
    import torch

    counts = u32_array(counts_blob, "counts", h)
    if int(counts.min()) < 1 or int(counts.max()) > k_max:
        raise CommandError(f"counts must each be 1..K_sparse_max {k_max}")
    indices = u32_array(indices_blob, "indices", h * k_max).reshape(h, k_max)
    used = np.arange(k_max)[None, :] < counts[:, None]
    if int(np.where(used, indices, 0).max()) >= n:
        raise CommandError(f"an index is out of range for the {n} stored tokens")
    return torch.from_numpy(indices.astype(np.int64)), torch.from_numpy(counts.astype(np.int64))
