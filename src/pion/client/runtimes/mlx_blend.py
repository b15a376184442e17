"""CacheBlend-style partial recompute of a composed multi-chunk mlx-lm cache (``recompute_ratio`` on MLX).

The transformers version (``pion.client.blend``; read its docstring) in mlx: chunks prefilled
independently never attended to each other, so run the first ``check_layer + 1`` layers over every
chunk token with full causal attention, keep the ``ratio`` of tokens whose keys at ``check_layer``
moved most, carry only those through the remaining layers, and write their fresh K/V into the cache
at their positions. ``ratio=1.0`` is a full prefill of the chunk tokens after the exact part.

The tokens are not contiguous after the selection, so a layer is run here from its parts (the
mlx-lm Llama layout: ``input_layernorm``, ``self_attn.{q,k,v,o}_proj`` and ``rope``, ``mlp``,
``post_attention_layernorm``) instead of through its ``__call__``: RoPE at each token's own
position (the tokens become a batch of length-1 sequences, ``mx.fast.rope`` takes one offset per
batch element), K/V written at those positions, and attention over every cached key up to each
query's position (an additive mask). Other layouts (q/k norms, sliding windows, MoE blocks that
take extra arguments) are refused with ``UnsupportedModel``.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np


class UnsupportedModel(ValueError):
    """A model whose decoder layers are not laid out like mlx-lm's Llama."""


_LAYER_PARTS = ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")
_ATTN_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj", "rope", "n_heads", "n_kv_heads", "scale")


def check_layout(model: Any) -> None:
    """Raise ``UnsupportedModel`` unless every decoder layer has the parts ``blend_recompute`` runs."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not layers or getattr(model.model, "embed_tokens", None) is None:
        raise UnsupportedModel("recompute_ratio needs an mlx-lm decoder with model.embed_tokens and model.layers")
    for i, layer in enumerate(layers):
        attn = getattr(layer, "self_attn", None)
        missing = [p for p in _LAYER_PARTS if getattr(layer, p, None) is None]
        missing += [f"self_attn.{p}" for p in _ATTN_PARTS if attn is not None and getattr(attn, p, None) is None]
        extra = [f"self_attn.{p}" for p in ("q_norm", "k_norm") if attn is not None and hasattr(attn, p)]
        if missing or extra:
            raise UnsupportedModel(f"recompute_ratio runs Llama-layout layers only; layer {i} of "
                                   f"{type(model).__name__} {'lacks ' + ', '.join(missing) if missing else 'has'}"
                                   f"{'' if not extra else ' ' + ', '.join(extra)}")


def _rope_at(rope: Any, x: mx.array, positions: mx.array) -> mx.array:
    """``x [1, H, S, D]`` with token ``s`` rotated to ``positions[s]`` (one length-1 sequence per token)."""
    as_batch = x.transpose(2, 1, 0, 3)  # [S, H, 1, D]
    return rope(as_batch, offset=positions).transpose(2, 1, 0, 3)  # type: ignore[no-any-return]


def _layer_at(layer: Any, x: mx.array, cache: Any, positions: mx.array, total: int) -> mx.array:
    """One decoder layer over tokens at ``positions``, writing their K/V into ``cache`` there."""
    attn = layer.self_attn
    h = layer.input_layernorm(x)
    n = x.shape[1]
    q = attn.q_proj(h).reshape(1, n, attn.n_heads, -1).transpose(0, 2, 1, 3)
    k = attn.k_proj(h).reshape(1, n, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
    v = attn.v_proj(h).reshape(1, n, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
    q, k = _rope_at(attn.rope, q, positions), _rope_at(attn.rope, k, positions)
    cache.keys[:, :, positions, :] = k.astype(cache.keys.dtype)
    cache.values[:, :, positions, :] = v.astype(cache.values.dtype)
    keys, values = cache.keys[:, :, :total, :], cache.values[:, :, :total, :]
    allowed = mx.arange(total)[None, :] <= positions[:, None]  # query at p sees keys 0..p
    mask = mx.where(allowed, mx.array(0.0, dtype=q.dtype), mx.array(-mx.inf, dtype=q.dtype))
    out = mx.fast.scaled_dot_product_attention(q, keys.astype(q.dtype), values.astype(q.dtype), scale=attn.scale,
                                               mask=mask)
    r = x + attn.o_proj(out.transpose(0, 2, 1, 3).reshape(1, n, -1))
    return r + layer.mlp(layer.post_attention_layernorm(r))  # type: ignore[no-any-return]


def blend_recompute(model: Any, cache: list[Any], token_ids: list[int], start: int, ratio: float,
                    check_layer: int = 1) -> list[int]:
    """Recompute the most deviating ``ratio`` of tokens ``start..`` of ``cache`` (one ``KVCache`` per layer) in place.

    Args: as ``pion.client.blend.blend_recompute``. Returns the recomputed positions, sorted.
    """
    check_layout(model)
    base = model.model
    total = len(token_ids)
    positions = np.arange(start, total)
    if len(positions) == 0:
        return []
    if any(int(c.offset) != total for c in cache):
        raise ValueError(f"the cache holds {sorted({int(c.offset) for c in cache})} tokens, token_ids {total}")
    hidden = base.embed_tokens(mx.array([token_ids[start:]]))
    selected = positions
    reused_k: mx.array | None = None
    for index, layer in enumerate(base.layers):
        if index == check_layer:
            reused_k = mx.array(np.array(cache[index].keys[:, :, start:total, :].astype(mx.float32)))
        if index == check_layer + 1 and reused_k is not None:
            fresh_k = cache[check_layer].keys[:, :, start:total, :].astype(mx.float32)
            deviation = np.array(((fresh_k - reused_k) ** 2).sum(axis=(0, 1, 3)))
            n_keep = max(1, int(round(ratio * len(positions))))
            keep = np.sort(np.argsort(-deviation, kind="stable")[:n_keep])
            hidden = hidden[:, mx.array(keep)]
            selected = positions[keep]
        hidden = _layer_at(layer, hidden, cache[index], mx.array(selected), total)
        mx.eval(hidden, cache[index].keys, cache[index].values)
    return [int(p) for p in selected]
