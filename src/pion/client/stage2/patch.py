"""``install_pion_attention_patch()``: Pion's attention function and mask function for transformers.

Registers ``"pion"`` with ``transformers.AttentionInterface`` and with ``AttentionMaskInterface``
(the mask registration matters: without it transformers builds no mask for an unknown
implementation and causality is silently lost). The function serves layers of a stage-2 cache
(``PionRemoteLayer``) through their lane; every other call falls through to sdpa, so a model
set to ``"pion"`` still runs normally with an ordinary cache or none.
"""

from __future__ import annotations

from typing import Any

import torch

from pion.client.stage2.layer import take_handoff

ATTN_NAME = "pion"
_installed = False


def pion_attention_forward(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0,
                           scaling: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention-interface function: ``[B, H, M, D]`` in, ``[B, M, H, D]`` out."""
    layer = take_handoff(key)
    if layer is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,  # type: ignore[no-any-return]
                                      scaling=scaling, **kwargs)
    if kwargs.get("softcap") is not None or kwargs.get("sliding_window") is not None:
        raise ValueError("Pion stage-2 attention supports neither softcap nor sliding-window layers")
    d = query.shape[-1]
    scale = float(scaling) if scaling is not None else d ** -0.5
    out = layer.lane.attend(layer.layer_idx, query, key, value, scale, local_part(attention_mask, layer.prefix_len))
    return out.transpose(1, 2).contiguous(), None


def local_part(mask: torch.Tensor | None, prefix_len: int) -> torch.Tensor | None:
    """The local-token columns of transformers' mask as an additive ``[M, L]`` float mask.

    None when there is no mask (transformers skips it for plain causal attention). The prefix
    columns must all be visible: a prefix that a query may not see cannot be served remotely.
    """
    if mask is None:
        return None
    rows = mask[0, 0]
    prefix, local = rows[:, :prefix_len], rows[:, prefix_len:]
    if mask.dtype == torch.bool:
        if not bool(prefix.all()):
            raise ValueError("the attention mask hides part of the cached prefix; stage 2 cannot serve it")
        return torch.zeros(local.shape, dtype=torch.float32).masked_fill(~local, torch.finfo(torch.float32).min)
    if bool((prefix < 0).any()):
        raise ValueError("the attention mask hides part of the cached prefix; stage 2 cannot serve it")
    return local.float().clamp(min=torch.finfo(torch.float32).min)


def install_pion_attention_patch(model: Any | None = None) -> None:
    """Register ``"pion"`` attention and mask functions (idempotent); with ``model``, select them.

    A model selects it with ``model.set_attn_implementation("pion")`` (done here when ``model``
    is given, and by ``make_pion_prompt_cache``).
    """
    global _installed
    if not _installed:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(ATTN_NAME, pion_attention_forward)
        AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
        _installed = True
    if model is not None:
        select_pion_attention(model)


def select_pion_attention(model: Any) -> None:
    """Switch ``model`` to Pion's attention (installing it first if needed)."""
    if not _installed:
        install_pion_attention_patch()
    if getattr(model.config, "_attn_implementation", None) != ATTN_NAME:
        model.set_attn_implementation(ATTN_NAME)
