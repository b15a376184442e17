"""The computations behind each ATTEND.PREFIX query form, on a warm slot's K/V ``[H_kv, N, D]``.

Callers (the command family) parse and validate; these functions only compute. Every form
uses scale ``1/sqrt(D)`` (a client whose model scales differently multiplies Q first) and
returns fp32 ``(out [H_q, M, D], lse [H_q, M])``; the fused forms fold in a dense causal
suffix and return the merged result.

``head_map`` is a long tensor of ``H_q`` kv-head indices, or None for the standard grouping
(query head h reads kv head ``h // (H_q / H_kv)``), which the flash kernel handles natively.
``window`` is fa_window: only the last W prefix positions are visible (None = all).
"""

from __future__ import annotations

import math

import torch

from pion.server.attention.dense import attend, causal_mask, repeat_heads
from pion.server.attention.merge import merge
from pion.server.attention.sparse import (
    attend_gathered, block_topk_indices, caller_indices, topk_indices,
)

Result = tuple[torch.Tensor, torch.Tensor]


def scale_for(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def map_heads(x: torch.Tensor, head_map: torch.Tensor | None, h_q: int) -> torch.Tensor:
    """``[H_kv, N, D]`` -> ``[H_q, N, D]`` by ``head_map`` (or the standard grouping)."""
    return repeat_heads(x, h_q) if head_map is None else x.index_select(0, head_map)


def _window_start(n: int, window: int | None) -> int:
    return 0 if window is None else max(0, n - window)


def dense(k: torch.Tensor, v: torch.Tensor, q: torch.Tensor, head_map: torch.Tensor | None = None,
          window: int | None = None, top_k: int = 0) -> Result:
    """QUERY: attention over the (windowed) prefix; ``0 < top_k < N`` keeps the top_k keys per row."""
    h_q, _, d = q.shape
    start = _window_start(k.shape[1], window)
    if start:
        k, v = k[:, start:], v[:, start:]
    if 0 < top_k < k.shape[1]:
        km, vm = map_heads(k, head_map, h_q), map_heads(v, head_map, h_q)
        idx, valid = topk_indices(q, km, top_k, 0)
        return attend_gathered(q, km, vm, scale_for(d), idx, valid)
    if head_map is not None:
        k, v = map_heads(k, head_map, h_q), map_heads(v, head_map, h_q)
    return attend(q, k, v, scale_for(d))


def _merge_suffix(prefix: Result, q: torch.Tensor, k_suf: torch.Tensor, v_suf: torch.Tensor,
                  head_map: torch.Tensor | None) -> Result:
    """Merge a prefix result with dense causal attention over the suffix K/V ``[H_kv, S, D]``."""
    h_q, m, d = q.shape
    s = k_suf.shape[1]
    if s == 0:
        return prefix
    if head_map is not None:
        k_suf, v_suf = map_heads(k_suf, head_map, h_q), map_heads(v_suf, head_map, h_q)
    mask = causal_mask(m, s, q.device) if m > 1 else None
    suffix = attend(q, k_suf, v_suf, scale_for(d), mask)
    return merge(prefix[0], prefix[1], suffix[0], suffix[1])


def fused(k: torch.Tensor, v: torch.Tensor, q: torch.Tensor, k_suf: torch.Tensor, v_suf: torch.Tensor,
          head_map: torch.Tensor | None = None, window: int | None = None) -> Result:
    """QUERY_FUSED: prefix attention + causal suffix attention (bottom-right aligned), merged."""
    return _merge_suffix(dense(k, v, q, head_map, window), q, k_suf, v_suf, head_map)


def sparse(k: torch.Tensor, v: torch.Tensor, q: torch.Tensor, indices: torch.Tensor, counts: torch.Tensor,
           window: int | None = None) -> Result:
    """QUERY_SPARSE: each head attends over its caller-given key indices."""
    h_q, m, d = q.shape
    n = k.shape[1]
    idx, valid = caller_indices(indices, counts, m, n, _window_start(n, window))
    return attend_gathered(q, repeat_heads(k, h_q), repeat_heads(v, h_q), scale_for(d), idx, valid)


def sparse_auto(k: torch.Tensor, v: torch.Tensor, q: torch.Tensor, block: int, k_top: int,
                head_map: torch.Tensor | None = None, window: int | None = None) -> Result:
    """QUERY_SPARSE_AUTO: block-mean top-K block choice per head and row, then attention over them."""
    h_q, _, d = q.shape
    km, vm = map_heads(k, head_map, h_q), map_heads(v, head_map, h_q)
    idx, valid = block_topk_indices(q, km, block, k_top, _window_start(k.shape[1], window))
    return attend_gathered(q, km, vm, scale_for(d), idx, valid)


def sparse_auto_fused(k: torch.Tensor, v: torch.Tensor, q: torch.Tensor, k_suf: torch.Tensor,
                      v_suf: torch.Tensor, block: int, k_top: int, head_map: torch.Tensor | None = None,
                      window: int | None = None) -> Result:
    """QUERY_SPARSE_AUTO_FUSED: sparse prefix + dense causal suffix, merged."""
    return _merge_suffix(sparse_auto(k, v, q, block, k_top, head_map, window), q, k_suf, v_suf, head_map)
