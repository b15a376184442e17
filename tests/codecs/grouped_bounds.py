"""Error bounds of the issue-20 formats, written from docs/formats.md (not from their code).

``kivi_bound(x, bits, group, relative)`` covers the whole blob: rows in full token groups get the
per-channel affine bound of their group, the trailing ``n % group`` rows the per-token symmetric
bound of their channel groups of ``group / 2`` -- of the values themselves, or, for the tail rows
flagged ``relative``, of (x - centre) / half-width of the last full group's channel ranges, times
the half-width. ``per_head_bound`` is int8's / fp8's bound with one scale per head.
"""

from __future__ import annotations

import numpy as np


def _fp16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float32).astype(np.float16).astype(np.float64)


def _slack(x: np.ndarray) -> np.ndarray:
    return 4 * np.finfo(np.float32).eps * np.abs(x) + 1e-30


def _symmetric(x: np.ndarray, width: int, top: int) -> np.ndarray:
    n, d = x.shape
    g = x.reshape(n, d // width, width).astype(np.float64)
    amax = np.abs(g).max(axis=2, keepdims=True)
    exact = amax / top
    scale = _fp16(exact)
    per_group = scale / 2 + top * np.abs(exact - scale) + _slack(amax)
    return np.broadcast_to(per_group, g.shape).reshape(n, d)


def _group_params(g: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = g.min(axis=1, keepdims=True), g.max(axis=1, keepdims=True)
    exact = (hi - lo) / levels
    return lo, hi, _fp16(exact), _fp16(lo)


def kivi_bound(x: np.ndarray, bits: int, group: int, relative: np.ndarray | None = None) -> np.ndarray:
    n, d = x.shape
    n_full = n // group
    levels = 2**bits - 1
    top = 2 ** (bits - 1) - 1
    out = np.empty((n, d))
    if n_full:
        g = x[: n_full * group].reshape(n_full, group, d).astype(np.float64)
        lo, hi, scale, bias = _group_params(g, levels)
        per_channel = scale / 2 + np.abs(lo - bias) + levels * np.abs((hi - lo) / levels - scale)
        per_channel += _slack(np.maximum(np.abs(lo), np.abs(hi)))
        out[: n_full * group] = np.broadcast_to(per_channel, g.shape).reshape(-1, d)
    if n % group:
        tail = x[n_full * group:]
        out[n_full * group:] = _symmetric(tail, group // 2, top)
        if relative is not None and relative.any():
            assert n_full, "relative tail rows need a full group before them"
            *_, scale, bias = _group_params(x[(n_full - 1) * group: n_full * group][None].astype(np.float64), levels)
            half = (scale * (levels / 2))[0, 0]
            centre = (bias[0, 0] + half).astype(np.float32).astype(np.float64)
            width = np.where(half > 0, half, 1.0)
            u = (tail - centre) / width
            rel = _symmetric(u, group // 2, top) * width
            rel += 8 * np.finfo(np.float32).eps * (np.abs(tail) + np.abs(centre) + width * (np.abs(u) + 1))
            out[n_full * group:][relative] = rel[relative]
    return out


def per_head_int8_bound(x: np.ndarray, head_dim: int) -> np.ndarray:
    return _symmetric(x, head_dim, 127)


def per_head_fp8_bound(x: np.ndarray, head_dim: int) -> np.ndarray:
    n, d = x.shape
    g = x.reshape(n, d // head_dim, head_dim).astype(np.float64)
    amax = np.abs(g).max(axis=2, keepdims=True)
    exact = amax / 448
    scale = _fp16(exact)
    per_head = scale / 1024 + 448 * np.abs(exact - scale) + _slack(amax)
    return np.broadcast_to(per_head, g.shape).reshape(n, d) + np.abs(x) / 16


def per_head_narrow_bound(x: np.ndarray, head_dim: int, bits: int) -> np.ndarray:
    """int7h* / int6h* / int5h*: the symmetric bound with M = 2^(bits-1) - 1 levels each side, one scale per head."""
    return _symmetric(x, head_dim, 2 ** (bits - 1) - 1)
