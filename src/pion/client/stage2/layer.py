"""A transformers cache layer whose prefix lives elsewhere (pion-server, or this process).

``PionRemoteLayer`` subclasses ``DynamicLayer`` and keeps only the *local* tokens (the suffix and
anything generated after it), but reports the prefix too: ``get_seq_length() = P + local`` and
``get_mask_sizes(q) = (P + local + q, 0)``, so transformers computes positions, mask sizes and the
query offset exactly as if the prefix were in the cache — no ``position_ids`` needed.

``update`` hands the layer to the attention function through a thread-local (the model's
attention module calls ``cache.update`` and then the attention function, with nothing in
between); the attention function checks that the key tensor it got is this layer's, so a stale
handoff is never used.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import torch
from transformers.cache_utils import DynamicLayer


class PrefixLane(Protocol):
    """How a layer attends over the prefix plus its local tokens (in-process, binary or RESP)."""

    def attend(self, layer_idx: int, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               scaling: float, local_mask: torch.Tensor | None) -> torch.Tensor:
        """``query`` ``[1, H_q, M, D]`` over prefix + local ``keys``/``values`` ``[1, H_kv, L, D]``
        (``local_mask``: additive ``[M, L]`` or None for plain causal) -> ``[1, H_q, M, D]``."""
        ...


_handoff = threading.local()


class PionRemoteLayer(DynamicLayer):
    """One decoder layer: local K/V here, the ``prefix_len`` prefix tokens behind ``lane``."""

    def __init__(self, layer_idx: int, prefix_len: int, lane: PrefixLane) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.prefix_len = prefix_len
        self.lane = lane

    @property
    def local_length(self) -> int:
        return DynamicLayer.get_seq_length(self)

    def get_seq_length(self) -> int:
        return self.prefix_len + self.local_length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.prefix_len + self.local_length + query_length, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if key_states.shape[0] != 1:
            raise ValueError("a Pion stage-2 cache serves batch 1 only")
        keys, values = super().update(key_states, value_states)
        _handoff.layer = self
        return keys, values

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0 or -tokens_to_remove > self.local_length:
            raise ValueError(f"a stage-2 layer can only drop its {self.local_length} local tokens, "
                             f"not {tokens_to_remove}")
        super().crop(tokens_to_remove)


def take_handoff(key: torch.Tensor) -> PionRemoteLayer | None:
    """The layer that just returned ``key`` from ``update``, consumed once; None otherwise."""
    layer = getattr(_handoff, "layer", None)
    _handoff.layer = None
    if layer is None or layer.keys is not key:
        return None
    return layer  # type: ignore[no-any-return]


def make_remote_cache(config: Any, prefix_len: int, lane: PrefixLane) -> Any:
    """A ``DynamicCache`` with one ``PionRemoteLayer`` per decoder layer, all behind ``lane``."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    n_layers = len(cache.layers) or int(config.get_text_config().num_hidden_layers)
    cache.layers = [PionRemoteLayer(i, prefix_len, lane) for i in range(n_layers)]
    return cache
