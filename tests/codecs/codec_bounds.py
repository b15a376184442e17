"""Per-format error bounds, written from each format's documented rule (not from its code).

Each ``*_bound(x)`` returns the largest |x - x_hat| the format may produce per
element for rows ``x`` [n, D]; the float32 slack covers rounding of the decoder's
own multiply/add.
"""

from __future__ import annotations

import numpy as np

GROUP = 32


def _fp16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).astype(np.float64)


def _slack(x: np.ndarray) -> np.ndarray:
    return 4 * np.finfo(np.float32).eps * np.abs(x) + 1e-30


def int8_bound(x: np.ndarray) -> np.ndarray:
    amax = np.abs(x).max(axis=1, keepdims=True).astype(np.float64)
    exact = amax / 127
    scale = _fp16(np.float32(exact))
    return scale / 2 + 127 * np.abs(exact - scale) + _slack(amax)


def _groups(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], x.shape[1] // GROUP, GROUP).astype(np.float64)


def _per_element(bound_per_group: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.broadcast_to(bound_per_group, _groups(x).shape).reshape(x.shape)


def fp8_bound(x: np.ndarray) -> np.ndarray:
    g = _groups(x)
    amax = np.abs(g).max(axis=2, keepdims=True)
    exact = amax / 448
    scale = _fp16(np.float32(exact))
    per_group = scale / 1024 + 448 * np.abs(exact - scale) + _slack(amax)
    return _per_element(per_group, x) + np.abs(x) / 16


def mlx4g32_bound(x: np.ndarray) -> np.ndarray:
    g = _groups(x)
    lo, hi = g.min(axis=2, keepdims=True), g.max(axis=2, keepdims=True)
    exact = (hi - lo) / 15
    scale = _fp16(np.float32(exact))
    bias = _fp16(np.float32(lo))
    per_group = scale / 2 + np.abs(lo - bias) + 15 * np.abs(exact - scale)
    per_group += _slack(np.maximum(np.abs(lo), np.abs(hi)))
    return _per_element(per_group, x)
