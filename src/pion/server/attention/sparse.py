"""Attention over a per-(head, query row) subset of the resident keys.

Every sparse form reduces to ``attend_gathered``: keys and values are gathered at ``idx``
``[H, M, S]`` (with ``valid`` marking real entries among padding), scored, and soft-maxed in
fp32 with the log-sum-exp, so a subset that covers every key gives dense attention exactly.
The subset comes from one of:
  * ``caller_indices``: QUERY_SPARSE's per-head index lists (``counts[h]`` valid entries).
  * ``topk_indices``: the top_k highest-scoring keys per row (QUERY's ``top_k`` < N).
  * ``block_topk_indices``: QUERY_SPARSE_AUTO's block choice — per head and query row, the
    first and last block of the window always, plus the ``k_top`` other blocks whose mean key
    scores highest against the query.
K/V here are already mapped to query heads (``[H_q, N, D]``).
"""

from __future__ import annotations

import torch


def attend_gathered(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, idx: torch.Tensor,
                    valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of each row of ``q`` ``[H, M, D]`` over its keys ``idx`` ``[H, M, S]``.

    Rows with no valid key come out 0 with lse -inf. Returns (out fp32, lse fp32).
    """
    h, m, _ = q.shape
    heads = torch.arange(h, device=q.device)[:, None, None]
    k_sel = k[heads, idx].float()  # [H, M, S, D]
    v_sel = v[heads, idx].float()
    scores = torch.einsum("hmd,hmsd->hms", q.float(), k_sel) * scale
    scores = scores.masked_fill(~valid, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    finite = torch.isfinite(lse)
    probs = torch.exp(scores - torch.where(finite, lse, torch.zeros_like(lse))[..., None])
    probs = torch.where(finite[..., None], probs, torch.zeros_like(probs))
    return torch.einsum("hms,hmsd->hmd", probs, v_sel), lse


def caller_indices(indices: torch.Tensor, counts: torch.Tensor, m: int, n: int,
                   window_start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """QUERY_SPARSE: ``indices`` ``[H, K_max]`` with ``counts[h]`` valid per head, shared by all rows.

    Positions before ``window_start`` (fa_window) are excluded. The caller has checked ranges.
    """
    h, k_max = indices.shape
    valid = torch.arange(k_max)[None, :] < counts[:, None]
    valid = valid & (indices >= window_start)
    idx = torch.where(valid, indices, torch.zeros_like(indices)).clamp_(0, max(n - 1, 0))
    return idx[:, None, :].expand(h, m, k_max), valid[:, None, :].expand(h, m, k_max)


def topk_indices(q: torch.Tensor, k: torch.Tensor, top_k: int,
                 window_start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top_k`` keys with the highest ``q.k`` per row, within the window."""
    scores = torch.matmul(q.float(), k.float().transpose(1, 2))
    if window_start > 0:
        scores[..., :window_start] = float("-inf")
    kk = min(top_k, k.shape[1] - window_start)
    idx = torch.topk(scores, kk, dim=-1).indices
    return idx, torch.ones_like(idx, dtype=torch.bool)


def block_topk_indices(q: torch.Tensor, k: torch.Tensor, block: int, k_top: int,
                       window_start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """QUERY_SPARSE_AUTO's choice: forced first/last block of the window plus ``k_top`` by mean-key score."""
    h, n, d = k.shape
    n_blocks = -(-n // block)
    padded = torch.zeros((h, n_blocks * block, d), dtype=torch.float32, device=k.device)
    padded[:, :n] = k.float()
    sizes = torch.full((n_blocks,), float(block))
    sizes[-1] = n - (n_blocks - 1) * block
    means = padded.view(h, n_blocks, block, d).sum(dim=2) / sizes[None, :, None]
    scores = torch.matmul(q.float(), means.transpose(1, 2))  # [H, M, n_blocks]
    first = window_start // block
    eligible = n_blocks - first
    scores[..., :first] = float("-inf")
    scores[..., first] = float("inf")
    scores[..., n_blocks - 1] = float("inf")
    n_forced = 1 if eligible == 1 else 2
    picked = torch.topk(scores, min(k_top + n_forced, eligible), dim=-1).indices  # [H, M, kb]
    idx = (picked[..., None] * block + torch.arange(block)).flatten(-2)  # [H, M, kb * B]
    valid = (idx < n) & (idx >= window_start)
    return idx.clamp_(0, n - 1), valid
