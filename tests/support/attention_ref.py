"""fp64 reference attention for the ATTEND.PREFIX tests (numpy, independent of the server's torch code)."""

from __future__ import annotations

import numpy as np


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None = None,
              head_map: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """softmax(q.k / sqrt(D)) v and the natural-log LSE, in float64.

    q ``[H_q, M, D]``, k/v ``[H_kv, N, D]``, ``allowed`` bool ``[H_q or 1, M, N]``; query head h reads
    kv head ``head_map[h]`` (default ``h // (H_q / H_kv)``).
    """
    h_q, m, d = q.shape
    h_kv = k.shape[0]
    mapping = head_map if head_map is not None else [h // (h_q // h_kv) for h in range(h_q)]
    kk = k.astype(np.float64)[mapping]
    vv = v.astype(np.float64)[mapping]
    scores = np.einsum("hmd,hnd->hmn", q.astype(np.float64), kk) / np.sqrt(d)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    lse = (np.log(total) + top)[..., 0]
    return np.einsum("hmn,hnd->hmd", weights / total, vv), lse


def causal_allowed(m: int, n_prefix: int, s: int, window: int | None = None) -> np.ndarray:
    """Bool ``[1, M, P + S]``: every (windowed) prefix key, and the suffix keys up to each row's position."""
    allowed = np.zeros((1, m, n_prefix + s), dtype=bool)
    start = 0 if window is None else max(0, n_prefix - window)
    allowed[:, :, start:n_prefix] = True
    for i in range(m):
        allowed[0, i, n_prefix:n_prefix + s - m + i + 1] = True
    return allowed


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


def close_to_reference(got: np.ndarray, want: np.ndarray) -> tuple[bool, float, float]:
    """(within the issue's gate: cosine >= 0.99999 and max abs <= 1e-5, cosine, max abs error)."""
    cos = cosine(got, want)
    err = float(np.abs(got.astype(np.float64) - want).max())
    return cos >= 0.99999 and err <= 1e-5, cos, err
