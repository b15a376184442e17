"""HybridRetrievalCache for mlx-lm: reuse the prefilled K/V of retrieved RAG chunks.

A subclass of ``pion.client.retrieval_cache.HybridRetrievalCache`` (read its docstring), which
``HybridRetrievalCache(mlx_model, ...)`` constructs. Inherited as they are: the keys, ``ingest`` /
``set_shared_stub`` / ``ingest_pack`` / ``composed_ids``, the chunk lookup and its KeyError for
chunks that are not held. Provided here: ``_describe_model``, ``prepare``, ``prepare_multi`` and
``_prefill``, which return and fill mlx-lm cache lists.

What is shared with the transformers version: the chunk stores (``pion.client.chunk_store``:
``inproc`` and ``pion``, one pipelined round trip each way through the one prefix transport) and
the keys — ``mlx_fingerprint`` equals the transformers fingerprint of the same model, so a chunk
ingested by either runtime is prepared by the other. Chunks cross this boundary as CPU tensors
(``ChunkKv``); on Metal that is one copy per chunk and layer.

What differs: K is moved to its new position with the model's own mlx-lm RoPE module, applied with
``offset = delta`` to every token as a sequence of length 1 (RoPE(a)·RoPE(b) = RoPE(a + b), so
this is the exact re-rotation); only position-independent RoPE (``nn.RoPE``, ``Llama3RoPE``) is
accepted. The CacheBlend-style partial recompute (``recompute_ratio``) runs through
``pion.client.runtimes.mlx_blend`` (Llama-layout mlx-lm models; others are refused at construction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np
import torch

from pion.client.chunk_store import ChunkKv
from pion.client.retrieval_cache import HybridRetrievalCache, _ids
from pion.client.rope import UnsupportedRope
from pion.client.runtimes import mlx_kv
from pion.client.runtimes.mlx_blend import blend_recompute, check_layout
from pion.client.runtimes.mlx_runtime import mlx_fingerprint, model_dtype
from pion.client.runtimes.transformers_kv import KvShape


def _to_torch(x: mx.array) -> torch.Tensor:
    return torch.from_numpy(np.array(x.astype(mx.float32), copy=True))


def _to_mx(t: torch.Tensor, dtype: Any) -> mx.array:
    return mx.array(t.detach().to("cpu", torch.float32).numpy()).astype(dtype)


def key_rope(model: Any) -> Any:
    """The model's RoPE module, when re-rotating keys by a constant is exact; UnsupportedRope otherwise."""
    import mlx.nn as nn
    from mlx_lm.models.rope_utils import Llama3RoPE

    attn = getattr(model.layers[0], "self_attn", None)
    rope = getattr(attn, "rope", None)
    if not isinstance(rope, (nn.RoPE, Llama3RoPE)):
        raise UnsupportedRope(f"keys cannot be moved exactly with RoPE {type(rope).__name__}; "
                              "only position-independent RoPE (default, linear, llama3) is supported")
    return rope


class MlxHybridRetrievalCache(HybridRetrievalCache):
    """Prefilled K/V of RAG chunks for an mlx-lm model (Llama family), composed at request time.

    Args: as ``HybridRetrievalCache`` (``recompute_ratio > 0`` needs a Llama-layout model:
    ``mlx_blend.UnsupportedModel`` otherwise).
    """

    def __init__(self, model: Any, backend: str = "inproc", vquant: str = "fp16", client: Any | None = None, *,
                 recompute_ratio: float = 0.0, **kwargs: Any) -> None:
        if recompute_ratio > 0:
            check_layout(model)
        super().__init__(model, backend, vquant, client, recompute_ratio=recompute_ratio,  # type: ignore[arg-type]
                         **kwargs)

    def _describe_model(self, model: Any) -> tuple[KvShape, tuple[str, ...]]:
        self.rope = key_rope(model)
        return mlx_kv.kv_shape(model), mlx_fingerprint(model, None)

    def prepare(self, chunk_id: str, suffix_ids: Sequence[int]) -> tuple[list[Any], list[int]]:
        """(mlx-lm cache list holding the chunk at 0.., suffix ids); KeyError if the chunk is not held."""
        (chunk,) = self._fetch([(chunk_id, self.namespace_for(chunk_id), 0)])
        dtype = model_dtype(self.model)
        layers = [(_to_mx(k, dtype), _to_mx(v, dtype)) for k, v in zip(chunk.keys, chunk.values, strict=True)]
        return _cache(layers), _ids(suffix_ids, "suffix_ids")

    def prepare_multi(self, ids: Sequence[str], suffix_ids: Sequence[int],
                      max_packs: int = 8) -> tuple[list[Any], list[int]]:
        """(cache list holding stub + each pack/chunk moved to its new position, suffix ids)."""
        if not ids:
            raise ValueError("prepare_multi needs at least one id")
        if len(ids) > max_packs:
            raise ValueError(f"{len(ids)} packs exceed max_packs={max_packs}; compose fewer, coarser packs")
        items = self._resolve(list(ids))
        dtype = model_dtype(self.model)
        parts: list[tuple[ChunkKv, int]] = [] if self._stub is None else [(self._stub, 0)]
        pos = 0 if self._stub is None else self._stub.n_tokens
        for chunk in items:
            parts.append((chunk, pos - chunk.base_pos))
            pos += chunk.n_tokens
        layers = []
        for layer in range(self.shape.n_layers):
            keys = [self._rotate(_to_mx(c.keys[layer], dtype), delta) for c, delta in parts]
            values = [_to_mx(c.values[layer], dtype) for c, _ in parts]
            layers.append((mx.concatenate(keys, axis=2), mx.concatenate(values, axis=2)))
        cache = _cache(layers)
        if self.recompute_ratio > 0:
            # Parts still where they were prefilled (the stub, a first pack right after it) are exact
            # already; recompute only from the first moved part on (as the transformers version).
            start = 0
            for chunk, _ in parts:
                if chunk.base_pos != start:
                    break
                start += chunk.n_tokens
            all_ids = [t for chunk, _ in parts for t in chunk.token_ids]
            if start < len(all_ids):
                blend_recompute(self.model, cache, all_ids, start, self.recompute_ratio, self.recompute_layer)
        return cache, _ids(suffix_ids, "suffix_ids")

    def _rotate(self, keys: mx.array, delta: int) -> mx.array:
        """``[1, H, n, D]`` keys moved ``delta`` positions later (exact RoPE composition)."""
        if delta == 0:
            return keys
        _, heads, n, dim = keys.shape
        as_rows = keys[0].transpose(1, 0, 2).reshape(n, heads, 1, dim)  # every token at "position 0"
        moved = self.rope(as_rows, offset=delta)
        return moved.reshape(n, heads, dim).transpose(1, 0, 2)[None]

    def _prefill(self, ids: list[int], after: ChunkKv | None) -> ChunkKv:
        """Prefill ``ids`` (after ``after``'s K/V when given) and keep only their own K/V."""
        from mlx_lm.models.cache import make_prompt_cache

        dtype = model_dtype(self.model)
        start = 0 if after is None else after.n_tokens
        cache = make_prompt_cache(self.model) if after is None else _cache(
            [(_to_mx(k, dtype), _to_mx(v, dtype)) for k, v in zip(after.keys, after.values, strict=True)])
        self.model.model(mx.array([ids]), cache=cache)  # hidden states only: the K/V are what we keep
        end = start + len(ids)
        keys = [_to_torch(c.keys[:, :, start:end, :]) for c in cache]
        values = [_to_torch(c.values[:, :, start:end, :]) for c in cache]
        return ChunkKv(keys, values, ids, start)


def _cache(layers: list[tuple[mx.array, mx.array]]) -> list[Any]:
    """A ``KVCache`` per layer adopting ``[1, H, n, D]`` K/V."""
    from mlx_lm.models.cache import KVCache

    out = []
    for k, v in layers:
        c = KVCache()
        c.keys, c.values, c.offset = k, v, k.shape[2]
        out.append(c)
    mx.eval([c.state[:2] for c in out])
    return out
