"""Dense attention with its log-sum-exp: ``softmax(scale * Q K^T + mask) V`` and ``logsumexp``.

Shapes (no batch axis): Q ``[H_q, M, D]``, K/V ``[H_kv, N, D]`` with ``H_kv`` dividing ``H_q``
(query head h reads kv head ``h // (H_q / H_kv)``, transformers' ``repeat_kv`` order), an
optional additive mask ``[1 or H_q, M, N]`` that uses ``MASKED`` (finfo.min, not -inf) for
excluded keys. Returns out ``[H_q, M, D]`` fp32 and lse ``[H_q, M]`` fp32 (natural log of the
sum over the keys of ``exp(scale * q.k + mask)``).

Two implementations, chosen by ``impl``:
  * ``flash``: ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` (a private op;
    same cost as ``F.scaled_dot_product_attention`` and it also returns the LSE).
  * ``matmul``: scores by matmul, ``torch.logsumexp``, softmax by ``exp(s - lse)``.
``auto`` uses flash on CPU when the op exists, matmul otherwise (CUDA, or a torch without it).

Pitfalls of the flash op, handled here rather than by callers: a zero-length K/V kills the
process with SIGFPE (N=0 is answered in Python: out 0, lse -inf); a row whose every key is
masked comes back with lse 0 (rows are detected from the mask and set to out 0, lse -inf);
``is_causal`` is top-left aligned and a bool mask is refused, so callers pass float masks.
"""

from __future__ import annotations

from typing import Literal

import torch

Impl = Literal["auto", "flash", "matmul"]
MASKED = torch.finfo(torch.float32).min  # additive mask value for an excluded key


def _flash_op() -> object | None:
    try:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    except (AttributeError, RuntimeError):
        return None


_FLASH = _flash_op()


def flash_available() -> bool:
    """True when torch has the CPU flash-attention op that returns the LSE."""
    return _FLASH is not None


def repeat_heads(x: torch.Tensor, h_q: int) -> torch.Tensor:
    """``[H_kv, N, D]`` -> ``[H_q, N, D]``, each kv head repeated for its group of query heads."""
    h_kv = x.shape[0]
    return x if h_kv == h_q else x.repeat_interleave(h_q // h_kv, dim=0)


def empty_rows(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Bool ``[.., M]``: rows in which the mask excludes every key (None when there is no mask)."""
    if mask is None:
        return None
    return (mask <= MASKED).all(dim=-1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
           mask: torch.Tensor | None = None, impl: Impl = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` over ``k``/``v``; returns (out fp32 ``[H_q, M, D]``, lse fp32 ``[H_q, M]``).

    Raises ValueError when the kv heads do not divide the query heads or shapes disagree.
    """
    h_q, m, d = q.shape
    h_kv, n, _ = k.shape
    if h_kv == 0 or h_q % h_kv or k.shape != v.shape or k.shape[2] != d:
        raise ValueError(f"attend: q {tuple(q.shape)} does not fit k {tuple(k.shape)} / v {tuple(v.shape)}")
    if n == 0 or m == 0:
        return (torch.zeros((h_q, m, d), dtype=torch.float32, device=q.device),
                torch.full((h_q, m), float("-inf"), dtype=torch.float32, device=q.device))
    use_flash = impl == "flash" or (impl == "auto" and _FLASH is not None and q.device.type == "cpu")
    if use_flash:
        if _FLASH is None:
            raise ValueError("attend: the flash CPU op is not available in this torch")
        out, lse = _attend_flash(q, k, v, scale, mask)
    else:
        out, lse = _attend_matmul(q, k, v, scale, mask)
    empty = empty_rows(mask)
    if empty is not None:
        empty = empty.expand(h_q, m)
        if bool(empty.any()):
            out = out.masked_fill(empty[..., None], 0.0)
            lse = lse.masked_fill(empty, float("-inf"))
    return out, lse


def _attend_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                  mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = k.dtype
    attn_mask = None if mask is None else mask.to(dtype)[None]
    out, lse = _FLASH(q.to(dtype)[None], k[None], v[None], 0.0, False,  # type: ignore[operator]
                      attn_mask=attn_mask, scale=scale)
    return out[0].float(), lse[0].float()


def _attend_matmul(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                   mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    h_q = q.shape[0]
    kf, vf = repeat_heads(k.float(), h_q), repeat_heads(v.float(), h_q)
    scores = torch.matmul(q.float(), kf.transpose(1, 2)) * scale
    if mask is not None:
        scores = scores + mask
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None])
    return torch.matmul(probs, vf), lse


def causal_mask(m: int, s: int, device: torch.device | None = None) -> torch.Tensor:
    """Additive ``[1, M, S]`` mask, bottom-right aligned: query row i sees keys ``j <= S - M + i``.

    That is the alignment a suffix of M new tokens needs against S local keys ending with them
    (the flash op's own ``is_causal`` is top-left aligned, wrong whenever M < S).
    """
    rows = torch.arange(m, device=device)[:, None] + (s - m)
    cols = torch.arange(s, device=device)[None, :]
    mask = torch.zeros((m, s), dtype=torch.float32, device=device)
    return mask.masked_fill(cols > rows, MASKED)[None]
