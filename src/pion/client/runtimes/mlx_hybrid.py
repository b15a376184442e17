"""Recurrent and hybrid mlx-lm models in PionPromptCache: ``ArraysCache`` states through ``SSM.PREFIX.*``.

mlx-lm gives a recurrent layer (Mamba, Mamba2, LFM2's short convs, Qwen3-Next's GatedDeltaNet,
Jamba, FalconH1, NemotronH, RWKV7 …) an ``ArraysCache``: a list of arrays (conv state, SSM state)
that holds the state after the last token. (Older mlx-lm called it ``MambaCache``; it is now an
``ArraysCache`` subclass or the class itself.) The wire layout is the transformers runtime's
(``pion.client.hybrid_prefix``, read that docstring first):

  * recurrent layer ``i`` (model index) → ``SSM.PREFIX.STORE ns i <blob>``, the reference state blob
    (``pion.client.state_blob``) of the layer's ``ArraysCache.cache`` list, in order (None → absent);
  * attention layer ``i`` → ``V.STOREBATCH <ns>_pk|_pv j …``, ``j`` counting attention layers only,
    registered with ``KV.PREFIX.REGISTER ns … LAYERS n_attention`` through the cache's
    ``PrefixTransport``; a model with no attention layer registers an empty prefix (kv_dim 1);
  * one pipelined round trip each way, the states first (``hybrid_store.finish_store``).

What differs from transformers is the state arrays' layout (mlx-lm keeps e.g. a conv state as
``[B, kernel-1, channels]``, transformers as ``[B, channels, kernel]``), so the namespace's layout
part is ``mlx:<letters>``: hybrid prefixes are shared between mlx-lm processes, never with the
transformers runtime (its ``layout=<letters>`` differs). Attention layers restore as in
``mlx_kv.build_cache`` (sliding-window layers as ``RotatingKVCache``).

A recurrent state is the state after the prefix's last token, so a prefix is reusable only at
that exact boundary: ``store`` refuses a cache whose attention layers hold more tokens than the
prefix (a pure recurrent cache has no token count to check: the caller must pass the prefix's own).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import numpy as np

from pion.client.hybrid_store import LayerKind, fetch_hybrid, finish_store
from pion.client.kv_shape import KvShape
from pion.client.runtimes import mlx_kv
from pion.client.state_blob import CODE_BF16, CODE_FP16, CODE_FP32, StateBlobError, pack_arrays, unpack_arrays
from pion.common.ids import Namespace

if TYPE_CHECKING:
    from pion.client.prefix_transport import PrefixTransport, Side
    from pion.client.prompt_cache import PionPromptCache

_CODES = {mx.float32: CODE_FP32, mx.float16: CODE_FP16, mx.bfloat16: CODE_BF16}
_DTYPES = {code: dtype for dtype, code in _CODES.items()}


def layer_kinds(model: Any) -> list[LayerKind]:
    """Each layer's kind from the cache list mlx-lm builds for the model: ``ArraysCache`` is recurrent."""
    from mlx_lm.models.cache import ArraysCache, make_prompt_cache

    return [LayerKind.RECURRENT if isinstance(c, ArraysCache) else LayerKind.ATTENTION
            for c in make_prompt_cache(model)]


def hybrid_transport_for(model: Any) -> MlxHybridPrefixTransport | None:
    """A transport when the model has recurrent layers; None for an all-attention model."""
    kinds = layer_kinds(model)
    if LayerKind.RECURRENT not in kinds:
        return None
    return MlxHybridPrefixTransport(model, kinds)


def encode_state(arrays: list[Any]) -> bytes:
    """One ``ArraysCache.cache`` list as a state blob (bf16 travels as its fp32 values: lossless)."""
    items: list[tuple[np.ndarray, int] | None] = []
    for array in arrays:
        if array is None:
            items.append(None)
            continue
        code = _CODES.get(array.dtype)
        if code is None:
            raise StateBlobError(f"dtype {array.dtype} has no state-blob code (fp32, fp16, bf16 only)")
        wire = array.astype(mx.float32) if code == CODE_BF16 else array
        items.append((np.array(wire, copy=False), code))
    return pack_arrays(items)


def decode_state(blob: bytes | memoryview) -> list[Any]:
    """A state blob as the mx arrays of an ``ArraysCache.cache`` list, in their original dtypes."""
    return [None if item is None else mx.array(item[0]).astype(_DTYPES[item[1]]) for item in unpack_arrays(blob)]


class MlxHybridPrefixTransport:
    """Stores and restores one prefix of an mlx-lm model with ``ArraysCache`` layers.

    Same interface as ``pion.client.hybrid_prefix.HybridPrefixTransport`` (``kv_shape``, ``layout``,
    ``store``, ``restore``), which ``PionPromptCache`` dispatches to.
    """

    def __init__(self, model: Any, kinds: list[LayerKind]) -> None:
        self.model = model
        self.kinds = kinds
        self.attention_layers = [i for i, k in enumerate(kinds) if k is LayerKind.ATTENTION]
        self.recurrent_layers = [i for i, k in enumerate(kinds) if k is LayerKind.RECURRENT]
        windows = mlx_kv.layer_windows(model)
        self.windows = [windows[i] for i in self.attention_layers]
        if self.attention_layers:
            full = mlx_kv.kv_shape(model)
            self.kv_shape = KvShape(len(self.attention_layers), full.n_kv_heads, full.head_dim)
        else:
            self.kv_shape = KvShape(0, 1, 1)

    @property
    def layout(self) -> str:
        """``mlx:`` and one letter per layer (A attention, R recurrent): part of the namespace."""
        return "mlx:" + "".join(k.value for k in self.kinds)

    def model_formats(self, attention_formats: list[str]) -> list[str]:
        """Formats per attention layer spread over every model layer ("float" for recurrent ones)."""
        out = ["float"] * len(self.kinds)
        for j, i in enumerate(self.attention_layers):
            out[i] = attention_formats[j]
        return out

    def state_blobs(self, cache: list[Any]) -> dict[int, bytes]:
        """Reference blobs of every recurrent layer of ``cache``, by model layer index."""
        return {i: encode_state(list(cache[i].cache)) for i in self.recurrent_layers}

    def store(self, pc: PionPromptCache, transport: PrefixTransport, ns: Namespace | str, ids: list[int],
              cache: list[Any], prefill_ms: float | None) -> bool:
        """PionPromptCache._store for mlx-lm hybrids: states, registration and K/V in one round trip."""
        t0 = time.perf_counter()
        n = len(ids)
        held = {int(cache[i].offset) for i in self.attention_layers}
        if held and held != {n}:
            raise ValueError(f"a hybrid prefix is reusable only at the token boundary its state was saved at: "
                             f"the cache holds {sorted(held)} tokens, the prefix {n}")
        pipe = transport.client.pipeline()
        blobs = self.state_blobs(cache)
        nbytes = 0
        for i, blob in blobs.items():
            pipe.ssm_prefix_store(ns, i, blob)
            nbytes += len(blob)
        if self.attention_layers:
            attention = self.attention_layers

            def rows(side: Side, j: int, dtype: Any) -> np.ndarray:
                return mlx_kv.float_rows(cache[attention[j]], side, n, mlx_kv.wire_np_dtype(dtype))

            def encoded(side: Side, j: int) -> np.ndarray | None:
                layer = cache[attention[j]]
                if transport.formats.of(side)[j] == mlx_kv.MLX4_FORMAT and mlx_kv.is_mlx4_cache(layer):
                    return mlx_kv.mlx4_rows(layer, side, n)
                return None

            nbytes += transport.queue_store(pipe, ns, rows, prefill_ms=prefill_ms, encoded=encoded)
        else:
            pipe.kv_prefix_register(ns, 1, "fp32", prefill_ms=prefill_ms)
        return finish_store(pc, ns, pipe, t0, nbytes, register_at=len(blobs))

    def restore(self, pc: PionPromptCache, transport: PrefixTransport, ns: Namespace | str, n_tokens: int,
                lookup_ms: float) -> list[Any]:
        """PionPromptCache._restore for mlx-lm hybrids: one round trip, then the model's own cache list."""
        from mlx_lm.models.cache import make_prompt_cache

        from pion.client.runtimes.mlx_runtime import model_dtype

        t0 = time.perf_counter()
        n_attn = len(self.attention_layers)
        replies = fetch_hybrid(transport, ns, n_tokens, n_attn, len(self.kinds))
        blobs: list[bytes | None] = replies[-1]
        t1 = time.perf_counter()
        if len(blobs) != len(self.kinds):
            raise ValueError(f"SSM.PREFIX.MFETCH returned {len(blobs)} layers, expected {len(self.kinds)}")
        cache = make_prompt_cache(self.model)
        nbytes = 0
        for i in self.recurrent_layers:
            blob = blobs[i]
            if blob is None:
                raise ValueError(f"recurrent state of layer {i} is missing for prefix {ns}")
            arrays = decode_state(blob)
            if len(arrays) != len(cache[i].cache):
                raise ValueError(f"layer {i}: state blob holds {len(arrays)} arrays, the model's cache "
                                 f"expects {len(cache[i].cache)}")
            cache[i].cache = arrays
            nbytes += len(blob)
        if n_attn:
            k_formats = [f if transport.k_wire == "raw" else "fp16" for f in transport.formats.k]
            v_formats = [f if transport.v_wire == "raw" else "fp16" for f in transport.formats.v]
            attention = mlx_kv.build_cache(self.kv_shape, n_tokens, k_formats, v_formats, replies[0], replies[1],
                                           model_dtype(self.model), self.windows)
            for j, i in enumerate(self.attention_layers):
                cache[i] = attention[j]
            nbytes += sum(len(d) for d in replies[0]) + sum(len(d) for d in replies[1])
        mx.eval([a for i in self.recurrent_layers for a in cache[i].cache if a is not None])
        stats = pc._stats
        stats.fetch_ms_total += lookup_ms + (time.perf_counter() - t0) * 1e3
        stats.bytes_fetched += nbytes
        stats.last_restore_ms = {"lookup": lookup_ms, "fetch": (t1 - t0) * 1e3,
                                 "build": (time.perf_counter() - t1) * 1e3}
        return cache
