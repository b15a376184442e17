"""Stage 2 for mlx-lm: the prefix part of attention served by pion-server, or in process.

``install_pion_attention_patch()`` replaces mlx-lm's ``scaled_dot_product_attention`` (in
``mlx_lm.models.base`` and in every model module that imported it by name) with a function
that serves layers of a stage-2 cache (``PionRemoteKVCache``) through their lane and passes
every other call to mlx-lm's own, so a patched process runs ordinary caches unchanged.

A ``PionRemoteKVCache`` keeps only the local tokens (suffix and generated) but reports
``offset = prefix_len + local``, so RoPE positions are the ones a full cache would give. Lanes:

* ``MlxInprocLane`` (the fast lane) — this process prefilled the prefix and keeps its arrays;
  each layer attends over ``concat(prefix, local)`` with ``mx.fast.scaled_dot_product_attention``
  (causal, bottom-right aligned). Pure graph construction: no ``mx.eval`` per layer, so mlx
  evaluates a whole forward lazily, as it does without Pion.
* ``MlxWireLane`` — one ``ATTEND.PREFIX.QUERY_FUSED`` per layer and forward over RESP or the
  binary lane (the server attends over the prefix with its LSE, attends the local part causally
  and merges): Q and the local K/V go out as fp32, the merged output comes back. It needs the
  query's values, so it evaluates per layer; a ``COLDMISS`` is rehydrated once with
  ``KV.PREFIX.WARM`` (``pion.client.stage2.wire``) and retried.

``MlxStage2Support`` is ``PionPromptCache(stage2=True)``'s half: the transformers
``pion.client.stage2.support.Stage2Support`` (on a miss: prefill, store the stage-1 rows, push
``ATTEND.PREFIX.STORE`` for every layer, keep the arrays for the fast lane; on a hit: check that the
ATTEND side is warm) with the mlx-lm arrays, caches and lanes above.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache, _BaseCache

from pion.client.stage2.lanes import Stage2Counters, query_rehydrating
from pion.client.stage2.support import Stage2Support

if TYPE_CHECKING:
    from pion.client.mlx_prompt_cache import PionPromptCache

logger = logging.getLogger(__name__)
QueryFn = Callable[[int, np.ndarray, np.ndarray, np.ndarray], bytes]


class MlxPrefixLane(Protocol):
    def attend(self, layer_idx: int, queries: mx.array, keys: mx.array, values: mx.array,
               scale: float) -> mx.array:
        """``queries [1, H_q, M, D]`` over prefix + local ``keys``/``values`` ``[1, H_kv, L, D]``
        (the last M local tokens are the queries') → ``[1, H_q, M, D]``."""
        ...


class PionRemoteKVCache(_BaseCache):  # type: ignore[misc]
    """One layer's cache: local K/V in an mlx-lm ``KVCache``, the prefix behind ``lane``."""

    def __init__(self, layer_idx: int, prefix_len: int, lane: MlxPrefixLane) -> None:
        self.layer_idx = layer_idx
        self.prefix_len = prefix_len
        self.lane = lane
        self.local = KVCache()

    @property
    def offset(self) -> int:
        return self.prefix_len + int(self.local.offset)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if keys.shape[0] != 1:
            raise ValueError("a Pion stage-2 cache serves batch 1 only")
        return self.local.update_and_fetch(keys, values)  # type: ignore[no-any-return]

    @property
    def state(self) -> Any:
        return () if self.local.keys is None else self.local.state[:2]

    @state.setter
    def state(self, v: Any) -> None:
        raise ValueError("a stage-2 cache is rebuilt with make_pion_prompt_cache, not from a saved state")

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Drop up to ``n`` local tokens (the prefix stays)."""
        return int(self.local.trim(n))

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> Any:
        if window_size is not None:
            raise ValueError("Pion stage-2 attention does not serve sliding-window layers")
        return "causal" if n > 1 else None

    def empty(self) -> bool:
        return False

    @property
    def nbytes(self) -> int:
        return int(self.local.nbytes)


class MlxInprocLane:
    """Prefix K/V ``[1, H_kv, P, D]`` per layer, held in this process."""

    def __init__(self, prefix_kv: list[tuple[mx.array, mx.array]], counters: Stage2Counters) -> None:
        self.prefix_kv = prefix_kv
        self.counters = counters

    def attend(self, layer_idx: int, queries: mx.array, keys: mx.array, values: mx.array,
               scale: float) -> mx.array:
        self.counters.inproc_calls += 1
        pk, pv = self.prefix_kv[layer_idx]
        k = mx.concatenate([pk.astype(keys.dtype), keys], axis=2)
        v = mx.concatenate([pv.astype(values.dtype), values], axis=2)
        mask = "causal" if queries.shape[2] > 1 else None
        return mx.fast.scaled_dot_product_attention(queries, k, v, scale=scale, mask=mask)


class MlxWireLane:
    """Attention served by pion-server; ``query_fn`` is one QUERY_FUSED over RESP or the binary lane."""

    def __init__(self, query_fn: QueryFn, rehydrate: Callable[[], None], counters: Stage2Counters) -> None:
        self.query_fn = query_fn
        self.rehydrate = rehydrate
        self.counters = counters

    def attend(self, layer_idx: int, queries: mx.array, keys: mx.array, values: mx.array,
               scale: float) -> mx.array:
        # The server scales by 1/sqrt(D): another scale travels pre-multiplied into Q.
        _, h_q, m, d = queries.shape
        factor = scale * d ** 0.5
        q = queries[0] if abs(factor - 1.0) < 1e-12 else queries[0] * factor
        reply = query_rehydrating(self.query_fn, self.rehydrate, self.counters, layer_idx, _fp32(q),
                                  _fp32(keys[0]), _fp32(values[0]))
        out = np.frombuffer(reply, dtype=np.float32).reshape(1, h_q, m, d)
        return mx.array(out).astype(queries.dtype)


def _fp32(x: mx.array) -> np.ndarray:
    return np.ascontiguousarray(np.array(x.astype(mx.float32), copy=False))


# ---- the patch ------------------------------------------------------------------------------

_original_sdpa: Callable[..., mx.array] | None = None


def pion_scaled_dot_product_attention(queries: mx.array, keys: mx.array, values: mx.array, cache: Any,
                                      scale: float, mask: Any, sinks: mx.array | None = None) -> mx.array:
    """mlx-lm's ``scaled_dot_product_attention`` with stage-2 layers served by their lane."""
    if isinstance(cache, PionRemoteKVCache):
        if sinks is not None:
            raise ValueError("Pion stage-2 attention does not support attention sinks")
        return cache.lane.attend(cache.layer_idx, queries, keys, values, scale)
    assert _original_sdpa is not None
    return _original_sdpa(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)


def install_pion_attention_patch(model: Any | None = None) -> None:
    """Patch mlx-lm's attention for stage-2 caches (idempotent; also patches modules loaded later
    when called again — ``make_pion_prompt_cache`` calls it). ``model`` is accepted for the
    transformers API's symmetry; the patch is process-wide and needs no per-model switch.
    """
    global _original_sdpa
    import mlx_lm.models.base as base

    if _original_sdpa is None:
        _original_sdpa = getattr(base, "scaled_dot_product_attention")
    for name, module in list(sys.modules.items()):
        if (name == "mlx_lm.models.base" or name.startswith("mlx_lm.models.")) and \
                getattr(module, "scaled_dot_product_attention", None) is _original_sdpa:
            setattr(module, "scaled_dot_product_attention", pion_scaled_dot_product_attention)


def make_remote_cache(n_layers: int, prefix_len: int, lane: MlxPrefixLane) -> list[Any]:
    """One ``PionRemoteKVCache`` per layer, all behind ``lane``."""
    return [PionRemoteKVCache(i, prefix_len, lane) for i in range(n_layers)]


def make_pion_prompt_cache(model: Any, namespace: str, pc: Any, prefix_len: int) -> list[Any]:
    """A cache list for ``model`` whose first ``prefix_len`` tokens are the prefix ``namespace``
    held by ``pc`` (an MLX ``PionPromptCache(stage2=True)``); generate with the suffix only.
    """
    if getattr(pc, "stage2", None) is None:
        raise ValueError("make_pion_prompt_cache needs a PionPromptCache created with stage2=True")
    return pc.stage2.make_cache(str(namespace), int(prefix_len))  # type: ignore[no-any-return]


# ---- PionPromptCache(stage2=True) -----------------------------------------------------------

class MlxStage2Support(Stage2Support):
    """Stage-2 state of one MLX PionPromptCache: the transformers ``Stage2Support`` (request path,
    warm checks, KV.PREFIX.WARM, lane choice, binary client) with mlx-lm arrays, caches and lanes.

    Args:
        pc: the owning MLX ``PionPromptCache``.
        lane: ``"auto"`` (in-process → binary → RESP), ``"inproc"``, ``"binary"`` or ``"resp"``.
    """

    def __init__(self, pc: PionPromptCache, lane: str = "auto") -> None:
        if lane not in ("auto", "inproc", "binary", "resp"):
            raise ValueError(f"stage2_lane must be auto, inproc, binary or resp, got {lane!r}")
        super().__init__(pc, lane)

    def make_cache(self, ns: str, prefix_len: int, force_inproc: bool = False) -> list[Any]:
        install_pion_attention_patch()
        lane: Any = self._lane_for(ns, prefix_len, force_inproc)  # an Mlx*Lane, made by the hooks below
        return make_remote_cache(self.pc.shape.n_layers, prefix_len, lane)

    def _push_rows(self, cache: Any, n_tokens: int) -> list[tuple[Any, Any]]:
        return [(_fp32(k[0]), _fp32(v[0])) for k, v in _prefix_arrays(cache, n_tokens)]

    def _held_arrays(self, cache: Any, n_tokens: int) -> list[tuple[Any, Any]]:
        return _prefix_arrays(cache, n_tokens)

    def _held_tokens(self, held: list[tuple[Any, Any]]) -> int:
        return int(held[0][0].shape[2])

    def _inproc_lane(self, held: list[tuple[Any, Any]]) -> Any:
        return MlxInprocLane(held, self.counters)

    def _wire_lane(self, sid: str, query: Any, rehydrate: Any) -> Any:
        return MlxWireLane(query, rehydrate, self.counters)

    def stats(self) -> dict[str, int]:
        c = self.counters
        return {"cold_rehydrates_observed": c.cold_rehydrates_observed, "stage2_wire_calls": c.wire_calls,
                "stage2_inproc_calls": c.inproc_calls}


def _prefix_arrays(cache: list[Any], n_tokens: int) -> list[tuple[mx.array, mx.array]]:
    """Each layer's first ``n_tokens`` as float ``[1, H, N, D]`` (a quantized layer is dequantized)."""
    from pion.client.runtimes.mlx_kv import is_mlx4_cache

    out = []
    for layer in cache:
        if is_mlx4_cache(layer):
            k, v = (mx.dequantize(packed, scales, biases, group_size=layer.group_size, bits=layer.bits)
                    for packed, scales, biases in (layer.keys, layer.values))
        else:
            k, v = layer.keys, layer.values
        out.append((mx.contiguous(k[:, :, :n_tokens, :]), mx.contiguous(v[:, :, :n_tokens, :])))
    mx.eval(out)
    return out
