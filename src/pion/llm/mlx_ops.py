"""``pion-llm --runtime mlx``: the engine's runtime operations for an mlx-lm model.

The engine, its segment chains, stores (memory or pion-server), budget and receipt are the
transformers ones; only these differ. Segments stay ``SegmentKV`` CPU tensors
``[n_layers, n_kv_heads, n, head_dim]`` (the stores' and the wire's layout), so a chain stored by
a transformers pion-llm restores here and the other way round, for the same model id and format
(the chain root names both). Each restore assembles one ``KVCache`` per layer; each new segment is
copied out of the mlx-lm cache before decoding appends to it.

``--stage2``: the same ``pion.llm.stage2.Stage2Restore`` warms the chain's ATTEND side and builds
its ``ChainLane`` (one pipelined ``ATTEND.PREFIX.QUERY`` per segment and layer, then local causal
attention and an online-softmax merge, in torch). Here the mlx-lm attention patch
(``install_pion_attention_patch``) serves ``PionRemoteKVCache`` layers through ``MlxChainLane``,
which hands the lane the query and local K/V as CPU tensors and gives mlx the merged output back —
one evaluation per layer, as every wire lane needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np
import torch

from pion.client.runtimes import mlx_kv, mlx_runtime
from pion.llm.engine import RuntimeOps
from pion.llm.segments import ModelShape, SegmentKV


def shape(model: Any) -> ModelShape:
    kv = mlx_kv.kv_shape(model)
    return ModelShape(kv.n_layers, kv.n_kv_heads, kv.head_dim, model_id=str(getattr(model, "pion_model_id", "unnamed")))


def context_tokens(model: Any) -> int:
    return int(getattr(model.args, "max_position_embeddings", 0) or 1 << 30)


def cache_from_segments(model: Any, segments: Sequence[SegmentKV]) -> list[Any]:
    """One ``KVCache`` per layer holding the concatenated segments in the model dtype (empty: a fresh cache)."""
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    if not segments:
        return make_prompt_cache(model)  # type: ignore[no-any-return]
    dtype = mlx_runtime.model_dtype(model)
    sides = [mx.array(torch.cat([pick(s) for s in segments], dim=2).to(torch.float32).numpy()).astype(dtype)
             for pick in (lambda s: s.keys, lambda s: s.values)]
    cache = []
    for layer in range(sides[0].shape[0]):
        c = KVCache()
        c.keys, c.values = sides[0][layer][None], sides[1][layer][None]
        c.offset = int(c.keys.shape[2])
        cache.append(c)
    mx.eval([c.state[:2] for c in cache])
    return cache


def segment_from_cache(cache: list[Any], start: int, end: int) -> SegmentKV:
    """Copy rows ``[start, end)`` of every layer out of an mlx-lm cache list (a stage-2 layer's local part)."""
    layers = [getattr(c, "local", c) for c in cache]  # PionRemoteKVCache keeps its own tokens in .local
    keys = mx.stack([c.keys[0, :, start:end, :] for c in layers])
    values = mx.stack([c.values[0, :, start:end, :] for c in layers])
    mx.eval(keys, values)
    return SegmentKV(torch.from_numpy(np.array(keys, copy=True)), torch.from_numpy(np.array(values, copy=True)))


class MlxChainLane:
    """An mlx-lm stage-2 lane over pion-llm's torch ``ChainLane`` (remote segments + local tokens)."""

    def __init__(self, lane: Any) -> None:
        self.lane = lane

    def attend(self, layer_idx: int, queries: mx.array, keys: mx.array, values: mx.array,
               scale: float) -> mx.array:
        def tensor(x: mx.array) -> torch.Tensor:
            return torch.from_numpy(np.array(x.astype(mx.float32), copy=True))

        out = self.lane.attend(layer_idx, tensor(queries), tensor(keys), tensor(values), scale, None)
        return mx.array(out.numpy()).astype(queries.dtype)


def select_stage2(model: Any) -> None:
    """Install the process-wide mlx-lm attention patch (ordinary caches run unchanged under it)."""
    from pion.client.runtimes.mlx_stage2 import install_pion_attention_patch

    install_pion_attention_patch(model)


def remote_cache(model: Any, prefix_len: int, lane: Any) -> list[Any]:
    """One ``PionRemoteKVCache`` per layer whose first ``prefix_len`` tokens ``lane`` serves."""
    from pion.client.runtimes.mlx_stage2 import make_remote_cache

    return make_remote_cache(len(model.layers), prefix_len, MlxChainLane(lane))


MLX_OPS = RuntimeOps(shape=shape, context_tokens=context_tokens, cache_from_segments=cache_from_segments,
                     segment_from_cache=segment_from_cache, generate_steps=mlx_runtime.generate_steps,
                     select_stage2=select_stage2, remote_cache=remote_cache)
