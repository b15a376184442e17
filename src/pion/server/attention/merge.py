"""Online-softmax merge of two partial attentions over disjoint key sets.

Given ``(out_a, lse_a)`` over keys A and ``(out_b, lse_b)`` over keys B, attention over A ∪ B is
``w_a * out_a + w_b * out_b`` with ``w = exp(lse - logaddexp(lse_a, lse_b))``. A side with lse
-inf (no keys) gets weight 0; rows where both sides are empty come out 0 with lse -inf.
"""

from __future__ import annotations

import torch


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
          lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Join two partial attentions; returns (out ``[.., M, D]``, lse ``[.., M]``)."""
    lse = torch.logaddexp(lse_a, lse_b)
    finite = torch.isfinite(lse)
    safe = torch.where(finite, lse, torch.zeros_like(lse))
    w_a = torch.where(finite, torch.exp(lse_a - safe), torch.zeros_like(lse))
    w_b = torch.where(finite, torch.exp(lse_b - safe), torch.zeros_like(lse))
    return w_a[..., None] * out_a + w_b[..., None] * out_b, lse
