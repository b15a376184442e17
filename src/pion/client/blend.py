"""CacheBlend-style partial recompute of a composed multi-chunk cache (beyond the original design).

Chunks prefilled independently never attended to each other, so their K/V differ from a full
prefill of the concatenated prompt. CacheBlend (Yao et al., 2024) recovers most of the gap by
recomputing a few tokens: run the first ``check_layer + 1`` layers over every chunk token with
full attention (cheap: a few layers of many), pick the ``ratio`` of tokens whose keys at
``check_layer`` deviate most from the reused ones, and carry only those tokens through the
remaining layers, writing their fresh K/V into the cache at their positions. Every other
token keeps its reused K/V.

Works on decoders laid out like Llama (``model.model.{embed_tokens, layers, rotary_emb}``,
each decoder layer taking ``hidden_states, attention_mask, position_ids, cache,
position_embeddings``): SmolLM2, Llama, Qwen2/3, Mistral. Cost: ``check_layer + 1`` layers
over all chunk tokens plus ``ratio`` of the tokens through the rest.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from pion.client.runtimes.transformers_runtime import model_device


class _ScatterCache:
    """What a decoder layer's attention sees as its cache: writes the new K/V at ``positions``
    of the composed cache (instead of appending) and returns the whole layer."""

    def __init__(self, cache: Any, positions: torch.Tensor) -> None:
        self.cache = cache
        self.positions = positions

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.cache.layers[layer_idx]
        layer.keys[:, :, self.positions] = keys.to(layer.keys.dtype)
        layer.values[:, :, self.positions] = values.to(layer.values.dtype)
        return layer.keys, layer.values


def _causal_mask(query_pos: torch.Tensor, total: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive ``[1, 1, q, total]`` mask: query at position p sees keys 0..p."""
    keys = torch.arange(total, device=query_pos.device)
    allowed = keys[None, :] <= query_pos[:, None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=query_pos.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def _cache_kwarg(layer: torch.nn.Module) -> str:
    params = inspect.signature(layer.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@torch.inference_mode()
def blend_recompute(model: Any, cache: Any, token_ids: list[int], start: int, ratio: float,
                    check_layer: int = 1) -> torch.Tensor:
    """Recompute the most deviating ``ratio`` of tokens ``start..`` of ``cache`` in place.

    Args:
        model: the decoder the cache belongs to.
        cache: a DynamicCache holding exactly ``token_ids`` (stub + re-rotated chunks).
        token_ids: the tokens the cache holds, in order.
        start: first position to consider (the exact stub before it is left alone).
        ratio: fraction of tokens ``start..`` carried through every layer.
        check_layer: the layer whose key deviation selects them.

    Returns:
        The selected positions (sorted), for inspection and tests.
    """
    base = model.model
    device = model_device(model)
    dtype = next(model.parameters()).dtype
    total = len(token_ids)
    positions = torch.arange(start, total, device=device)
    if len(positions) == 0:
        return positions
    hidden = base.embed_tokens(torch.tensor([token_ids[start:]], dtype=torch.long, device=device))
    selected = positions
    reused_k: torch.Tensor | None = None
    for index, layer in enumerate(base.layers):
        if index == check_layer:
            reused_k = cache.layers[index].keys[:, :, start:].clone()
        if index == check_layer + 1 and reused_k is not None:
            fresh_k = cache.layers[check_layer].keys[:, :, start:]
            deviation = (fresh_k.float() - reused_k.float()).pow(2).sum(dim=(0, 1, 3))
            n_keep = max(1, int(round(ratio * len(positions))))
            keep = torch.topk(deviation, n_keep).indices.sort().values
            hidden = hidden[:, keep]
            selected = positions[keep]
        pos_ids = selected[None]
        out = layer(hidden, attention_mask=_causal_mask(selected, total, dtype), position_ids=pos_ids,
                    position_embeddings=base.rotary_emb(hidden, pos_ids),
                    **{_cache_kwarg(layer): _ScatterCache(cache, selected)})
        hidden = out[0] if isinstance(out, tuple) else out
    return selected
