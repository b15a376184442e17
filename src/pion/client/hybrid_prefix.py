"""Hybrid and recurrent models in PionPromptCache: attention K/V plus recurrent state per prefix.

transformers 5.x keeps a hybrid model's cache as one ``DynamicCache`` whose layers differ:
``DynamicLayer`` (attention K/V), ``LinearAttentionLayer`` (``conv_states`` /
``recurrent_states`` of Mamba, Mamba2, GatedDeltaNet, LFM2's short convs ...),
``LinearAttentionAndFullAttentionLayer`` (both) and ``DummyLayer`` (nothing). ``layer_kinds``
reads that layout from ``DynamicCache(config=…)`` without running the model.

Wire layout of one prefix ``ns`` (the attention half is PionPromptCache's usual prefix):
  * recurrent layer ``i`` (model index) → ``SSM.PREFIX.STORE ns i <blob>``, the reference state
    blob (``pion.client.state_blob``) of ``[conv_0, rec_0, conv_1, rec_1, …]`` per state index;
  * attention layer ``i`` → ``V.STOREBATCH <ns>_pk|_pv j …`` where ``j`` counts attention
    layers only, registered with ``KV.PREFIX.REGISTER ns … LAYERS n_attention``. A model with no
    attention layer registers an empty prefix (kv_dim 1, no LAYERS) so that LOOKUP, DROP and
    eviction treat the state exactly like a K/V prefix.
Store is one pipelined round trip with the state first, so a LOOKUP that answers +HIT (all
attention layers present) never sees a prefix whose state is still missing. Restore is one
pipelined round trip: two ``V.MFETCH`` and one ``SSM.PREFIX.MFETCH`` of every model layer.
Under ``--admission 2hit`` the register may answer ``+DEFERRED``: the rows in the same pipeline
are then refused (no sessions) and the state is dropped again, so nothing is kept; the cache
counts a deferral, not a failure (keeping the one round trip costs the rows' wire bytes once).
The attention half goes through the shared ``pion.client.prefix_transport`` (the
``PrefixTransport`` of the ``PionPromptCache``, over the attention layers only): its register,
wire dtypes and decoding (``restore_dtype``) are those of every other prefix; this module adds
the state commands to the same pipeline and places layer ``j`` back at model layer ``i``.

Caveats measured on transformers 5.24 (see docs/runtime.md, "Hybrid models"):
  * a recurrent prefix is reusable only at the exact token boundary its state was saved at,
    so ``store`` refuses a cache that holds more tokens than the prefix;
  * the Mamba1 family (Mamba, FalconMamba, Jamba's Mamba layers) starts a multi-token forward
    from a zero SSM state on its reference path, so the suffix after a restore must be fed one
    token at a time: ``suffix_logits`` does that for them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pion.client.runtimes.transformers_kv import KvShape, layer_rows
from pion.client.runtimes.transformers_runtime import forward_logits, model_device
from pion.client.hybrid_store import LayerKind
from pion.client.hybrid_store import fetch_hybrid
from pion.client.hybrid_store import finish_store as _finish_store
from pion.client.state_blob import decode_arrays, encode_arrays
from pion.common.ids import Namespace

if TYPE_CHECKING:
    from pion.client.prefix_transport import PrefixTransport, Side
    from pion.client.prompt_cache import PionPromptCache

logger = logging.getLogger(__name__)

# Families whose reference path ignores the cached SSM state for multi-token forwards.
TOKEN_BY_TOKEN_MODEL_TYPES = frozenset({"mamba", "falcon_mamba", "jamba"})


def layer_kinds(model: Any) -> list[LayerKind]:
    """Each decoder layer's cache kind, read from the cache transformers builds for this config."""
    from transformers import DynamicCache
    from transformers.cache_utils import CacheLayerMixin, LinearAttentionCacheLayerMixin

    kinds = []
    for layer in DynamicCache(config=model.config).layers:
        recurrent = isinstance(layer, LinearAttentionCacheLayerMixin)
        attention = isinstance(layer, CacheLayerMixin)
        kinds.append(LayerKind.BOTH if recurrent and attention else LayerKind.RECURRENT if recurrent
                     else LayerKind.ATTENTION if attention else LayerKind.NONE)
    return kinds


def hybrid_transport_for(model: Any) -> HybridPrefixTransport | None:
    """A transport when the model has recurrent layers; None for an all-attention model."""
    kinds = layer_kinds(model)
    if not any(k in (LayerKind.RECURRENT, LayerKind.BOTH) for k in kinds):
        return None
    return HybridPrefixTransport(model, kinds)


def needs_token_by_token_suffix(model: Any) -> bool:
    """True for the Mamba1 family (see the module docstring)."""
    return str(getattr(model.config, "model_type", "")) in TOKEN_BY_TOKEN_MODEL_TYPES


def suffix_logits(model: Any, cache: Any, suffix_ids: Sequence[int]) -> torch.Tensor:
    """Last-position logits of ``suffix_ids`` run after a restored ``cache`` (extends it)."""
    ids = [int(t) for t in suffix_ids]
    if not needs_token_by_token_suffix(model):
        return forward_logits(model, ids, cache)[0]
    logits = torch.empty(0)
    for token in ids:
        logits = forward_logits(model, [token], cache)[0]
    return logits


class HybridPrefixTransport:
    """Stores and restores one prefix of a model whose cache mixes attention and recurrent layers."""

    def __init__(self, model: Any, kinds: list[LayerKind]) -> None:
        self.model = model
        self.kinds = kinds
        self.attention_layers = [i for i, k in enumerate(kinds) if k in (LayerKind.ATTENTION, LayerKind.BOTH)]
        self.recurrent_layers = [i for i, k in enumerate(kinds) if k in (LayerKind.RECURRENT, LayerKind.BOTH)]
        if self.attention_layers:
            full = KvShape.from_config(model.config)
            self.kv_shape = KvShape(len(self.attention_layers), full.n_kv_heads, full.head_dim)
        else:
            self.kv_shape = KvShape(0, 1, 1)

    @property
    def layout(self) -> str:
        """One letter per layer (A attention, R recurrent, B both, - none); part of the namespace."""
        return "".join(k.value for k in self.kinds)

    def state_blobs(self, cache: Any) -> dict[int, bytes]:
        """Reference blobs of every recurrent layer of ``cache``, by model layer index."""
        blobs = {}
        for i in self.recurrent_layers:
            layer = cache.layers[i]
            arrays: list[torch.Tensor | None] = []
            for s in range(layer.number_of_states):
                arrays.append(layer.conv_states[s] if layer.is_conv_states_initialized[s] else None)
                arrays.append(layer.recurrent_states[s] if layer.is_recurrent_states_initialized[s] else None)
            blobs[i] = encode_arrays(arrays)
        return blobs

    def store(self, pc: PionPromptCache, transport: PrefixTransport, ns: Namespace | str, ids: list[int],
              cache: Any, prefill_ms: float | None) -> bool:
        """PionPromptCache._store for hybrids: state, registration and K/V in one round trip.

        ``transport`` is the cache's ``PrefixTransport`` over the attention layers (``kv_shape``).
        """
        t0 = time.perf_counter()
        n = len(ids)
        if self.attention_layers and cache.get_seq_length() != n:
            raise ValueError(f"a hybrid prefix is reusable only at the token boundary its state was saved at: "
                             f"the cache holds {cache.get_seq_length()} tokens, the prefix {n}")
        pipe = transport.client.pipeline()
        nbytes = 0
        blobs = self.state_blobs(cache)
        for i, blob in blobs.items():
            pipe.ssm_prefix_store(ns, i, blob)
            nbytes += len(blob)
        if self.attention_layers:
            attention = self.attention_layers

            def rows(side: Side, j: int, dtype: torch.dtype) -> np.ndarray:
                return layer_rows(cache, attention[j], side, n, dtype)

            nbytes += transport.queue_store(pipe, ns, rows, prefill_ms=prefill_ms)
        else:
            pipe.kv_prefix_register(ns, 1, "fp32", prefill_ms=prefill_ms)
        return _finish_store(pc, ns, pipe, t0, nbytes, register_at=len(blobs))

    def restore(self, pc: PionPromptCache, transport: PrefixTransport, ns: Namespace | str, n_tokens: int,
                lookup_ms: float) -> Any:
        """PionPromptCache._restore for hybrids: one round trip, then a cache of the model's layout."""
        from transformers import DynamicCache

        t0 = time.perf_counter()
        n_attn = len(self.attention_layers)
        replies = fetch_hybrid(transport, ns, n_tokens, n_attn, len(self.kinds))
        blobs: list[bytes | None] = replies[-1]
        t1 = time.perf_counter()
        restored = transport.decode(replies[0], replies[1], n_tokens) if n_attn else None
        t2 = time.perf_counter()
        device, dtype = model_device(self.model), next(self.model.parameters()).dtype
        cache = DynamicCache(config=self.model.config)
        nbytes = 0
        if len(blobs) != len(self.kinds):
            raise ValueError(f"SSM.PREFIX.MFETCH returned {len(blobs)} layers, expected {len(self.kinds)}")
        for i in self.recurrent_layers:
            blob = blobs[i]
            if blob is None:
                raise ValueError(f"recurrent state of layer {i} is missing for prefix {ns}")
            nbytes += len(blob)
            _set_states(cache, i, decode_arrays(blob, device))
        if restored is not None:
            nbytes += sum(len(d) for d in replies[0]) + sum(len(d) for d in replies[1])
            for j, i in enumerate(self.attention_layers):
                k, v = restored.keys[j], restored.values[j]
                assert k is not None and v is not None  # decode set every layer or raised
                cache.update(k.to(device=device, dtype=dtype), v.to(device=device, dtype=dtype), i)
        stats = pc._stats
        stats.fetch_ms_total += lookup_ms + (time.perf_counter() - t0) * 1e3
        stats.bytes_fetched += nbytes
        stats.last_restore_ms = {"lookup": lookup_ms, "fetch": (t1 - t0) * 1e3, "decode": (t2 - t1) * 1e3,
                                 "build": (time.perf_counter() - t2) * 1e3}
        return cache


def _set_states(cache: Any, layer_idx: int, arrays: list[torch.Tensor | None]) -> None:
    """Put ``[conv_0, rec_0, conv_1, rec_1, …]`` into a fresh cache layer through transformers' API."""
    layer = cache.layers[layer_idx]
    if len(arrays) != 2 * layer.number_of_states:
        raise ValueError(f"layer {layer_idx}: state blob holds {len(arrays)} arrays, the model's cache "
                         f"expects {2 * layer.number_of_states}")
    for s in range(layer.number_of_states):
        conv, recurrent = arrays[2 * s], arrays[2 * s + 1]
        if conv is not None:
            cache.update_conv_state(conv, layer_idx, state_idx=s)
        if recurrent is not None:
            cache.update_recurrent_state(recurrent, layer_idx, state_idx=s)
        layer.has_previous_state[s] = conv is not None or recurrent is not None
