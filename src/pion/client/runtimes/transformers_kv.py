"""Moving K/V between a transformers ``DynamicCache`` and Pion's row layout.

transformers keeps each layer's keys and values as ``[batch=1, n_kv_heads, n_tokens, head_dim]``;
pion-server stores rows ``[n_tokens, n_kv_heads * head_dim]`` (one row per token, the spec's
[N, H*D] layout). GQA needs nothing special: ``kv_dim = n_kv_heads * head_dim``.

Restores write straight into preallocated per-side tensors ``[n_layers, 1, H, N, D]``: one pass per
layer does the transpose and the dtype conversion, and the cache layers are views of those tensors,
so building the cache itself copies nothing.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class KvShape:
    """The K/V geometry of a decoder model."""

    n_layers: int
    n_kv_heads: int
    head_dim: int

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @classmethod
    def from_config(cls, config: Any) -> KvShape:
        text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
        n_heads = int(text.num_attention_heads)
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // n_heads
        n_kv_heads = getattr(text, "num_key_value_heads", None) or n_heads
        return cls(int(text.num_hidden_layers), int(n_kv_heads), int(head_dim))


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


class RestoreBuffers:
    """Preallocated K and V tensors for one restore, filled layer by layer, then handed to a cache."""

    def __init__(self, shape: KvShape, n_tokens: int, dtype: torch.dtype) -> None:
        self.shape = shape
        self.n_tokens = n_tokens
        dims = (shape.n_layers, 1, shape.n_kv_heads, n_tokens, shape.head_dim)
        self.keys = torch.empty(dims, dtype=dtype)
        self.values = torch.empty(dims, dtype=dtype)

    def fill(self, side: str, layer: int, rows: torch.Tensor) -> None:
        """Copy ``[n_tokens, kv_dim]`` rows (any float dtype) into the layer, converting on the way."""
        shape = self.shape
        if rows.numel() != self.n_tokens * shape.kv_dim:
            raise ValueError(f"layer {layer} {side}: got {rows.numel()} values, expected "
                             f"{self.n_tokens} x {shape.kv_dim}")
        target = (self.keys if side == "k" else self.values)[layer, 0]
        target.copy_(rows.view(self.n_tokens, shape.n_kv_heads, shape.head_dim).transpose(0, 1))

    def to_cache(self, config: Any, device: torch.device) -> Any:
        """A ``DynamicCache`` whose layers are views of these buffers (moved to ``device`` if needed)."""
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        keys, values = self.keys, self.values
        if keys.device != device:
            keys, values = keys.to(device), values.to(device)
        cache = DynamicCache(config=config)
        for i in range(self.shape.n_layers):
            k, v = keys[i], values[i]
            layer = cache.layers[i] if i < len(cache.layers) else None
            if type(layer) is DynamicLayer:
                # update() would torch.cat onto an empty tensor, copying the whole prefix once more.
                layer.lazy_initialization(k, v)
                layer.keys, layer.values = k, v
            else:
                cache.update(k, v, i)
        return cache
