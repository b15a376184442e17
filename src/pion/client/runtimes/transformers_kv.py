"""Moving K/V between a transformers ``DynamicCache`` and Pion's row layout.

transformers keeps each layer's keys and values as ``[batch=1, n_kv_heads, n_tokens, head_dim]``;
pion-server stores rows ``[n_tokens, n_kv_heads * head_dim]`` (one row per token, the original design's
[N, H*D] layout). GQA needs nothing special: ``kv_dim = n_kv_heads * head_dim``.

Restores copy nothing: each layer is a ``[1, H, N, D]`` view over the reply bytes (``torch.frombuffer``),
and the model's first forward, which concatenates the suffix onto every layer anyway, does the
transpose and the fp16→fp32 conversion in that same copy (see ``RestoredKv``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from pion.client.kv_shape import KvShape  # re-exported: defined torch-free for the MLX runtime

__all__ = ["KvShape", "RestoredKv", "frombuffer", "layer_rows"]


def layer_rows(cache: Any, layer: int, side: str, n_tokens: int, dtype: torch.dtype) -> np.ndarray:
    """One layer-side of a cache as contiguous ``[n_tokens, kv_dim]`` rows on the CPU (for V.STOREBATCH)."""
    cache_layer = cache.layers[layer]
    states = cache_layer.keys if side == "k" else cache_layer.values
    batch, heads, tokens, head_dim = states.shape
    if batch != 1 or tokens < n_tokens:
        raise ValueError(f"layer {layer} holds {tokens} tokens x batch {batch}; need batch 1 and {n_tokens} tokens")
    rows = states[0, :, :n_tokens, :].transpose(0, 1).reshape(n_tokens, heads * head_dim)
    return rows.to(device="cpu", dtype=dtype).contiguous().numpy()


def frombuffer(data: bytes | bytearray | memoryview, dtype: torch.dtype) -> torch.Tensor:
    """A tensor over reply bytes without copying; only ever read, never written."""
    with warnings.catch_warnings():
        # torch warns that ``bytes`` is read-only; we only read from it.
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(data, dtype=dtype)


class RestoredKv:
    """A restored prefix: per-layer K and V tensors, by default zero-copy views of the reply bytes.

    ``set_layer`` wraps ``[n_tokens * kv_dim]`` values (any float dtype, e.g. fp16 straight from the
    wire) as a ``[1, H, N, D]`` view without copying. ``to_cache`` then either hands those views to
    the cache as they are (``materialize=False``, the default) — the model's first forward
    concatenates its suffix onto them, and that one ``torch.cat`` does the transpose and the
    fp16→model-dtype conversion in the copy it makes anyway — or first copies them into
    preallocated contiguous tensors of the model dtype (``materialize=True``), for callers that read
    the cache tensors directly.
    """

    def __init__(self, shape: KvShape, n_tokens: int) -> None:
        self.shape = shape
        self.n_tokens = n_tokens
        self.keys: list[torch.Tensor | None] = [None] * shape.n_layers
        self.values: list[torch.Tensor | None] = [None] * shape.n_layers

    def set_layer(self, side: str, layer: int, flat: torch.Tensor) -> None:
        """Adopt one layer-side's ``[n_tokens * kv_dim]`` values (kept by reference, not copied)."""
        shape = self.shape
        if flat.numel() != self.n_tokens * shape.kv_dim:
            raise ValueError(f"layer {layer} {side}: got {flat.numel()} values, expected "
                             f"{self.n_tokens} x {shape.kv_dim}")
        view = flat.view(1, self.n_tokens, shape.n_kv_heads, shape.head_dim).transpose(1, 2)
        (self.keys if side == "k" else self.values)[layer] = view

    def _layers(self, dtype: torch.dtype, device: torch.device, materialize: bool) -> list[tuple[Any, Any]]:
        pairs = [(k, v) for k, v in zip(self.keys, self.values, strict=True) if k is not None and v is not None]
        if len(pairs) != self.shape.n_layers:
            raise ValueError(f"restored prefix has {len(pairs)} of {self.shape.n_layers} layers")
        if not materialize:
            return [(k.to(device), v.to(device)) for k, v in pairs]
        dims = (self.shape.n_layers, 1, self.shape.n_kv_heads, self.n_tokens, self.shape.head_dim)
        out_k, out_v = torch.empty(dims, dtype=dtype), torch.empty(dims, dtype=dtype)
        for i, (k, v) in enumerate(pairs):
            out_k[i].copy_(k)
            out_v[i].copy_(v)
        out_k, out_v = out_k.to(device), out_v.to(device)
        return [(out_k[i], out_v[i]) for i in range(self.shape.n_layers)]

    def to_cache(self, config: Any, device: torch.device, dtype: torch.dtype = torch.float32,
                 materialize: bool = False) -> Any:
        """A ``DynamicCache`` holding the prefix; see the class docstring for ``materialize``."""
        return dynamic_cache(config, self._layers(dtype, device, materialize), dtype)

    def stacked(self, side: str) -> torch.Tensor:
        """One side as a new ``[n_layers, n_kv_heads, n_tokens, head_dim]`` tensor (pion-llm's segment layout)."""
        layers = self.keys if side == "k" else self.values
        if any(t is None for t in layers):
            raise ValueError(f"restored prefix is missing layers of side {side}")
        return torch.stack([t[0] for t in layers if t is not None])


def dynamic_cache(config: Any, layers: Sequence[tuple[torch.Tensor, torch.Tensor]], dtype: torch.dtype) -> Any:
    """A ``DynamicCache`` adopting ``[1, H, N, D]`` K/V tensors per layer (the one assembly routine).

    Plain layers adopt the tensors as they are (``update`` would ``torch.cat`` onto an empty tensor,
    copying the whole prefix once more); other layer kinds (sliding window) go through ``update`` in
    ``dtype``. The cache owns the tensors afterwards.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    for i, (k, v) in enumerate(layers):
        layer = cache.layers[i] if i < len(cache.layers) else None
        if type(layer) is DynamicLayer:
            layer.lazy_initialization(k, v)
            layer.keys, layer.values = k, v
        else:
            cache.update(k.to(dtype), v.to(dtype), i)
    return cache
