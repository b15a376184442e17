"""HybridRetrievalCache: reuse the prefilled K/V of retrieved RAG chunks (the original design's RAG hydration).

Roles, in the order an application meets them:
  * ``ingest(chunk_id, ids)`` — once per chunk: prefill it alone at positions 0.., keep its K/V.
  * ``prepare(chunk_id, suffix_ids)`` — once per single-chunk request: a fresh ``DynamicCache``
    holding the chunk, and the suffix to run after it. The caller owns the cache.
  * ``set_shared_stub(ids)`` / ``ingest_pack(pack_id, ids)`` — a shared stub (system prompt)
    prefilled once at 0, and packs (one or a few chunks' tokens) prefilled right after it, so
    each pack has attended to the stub as it will at serving time.
  * ``prepare_multi(ids, suffix_ids, max_packs=8)`` — once per multi-chunk request: stub, then
    every pack or chunk in the given order, each moved to its new position by exact RoPE
    re-rotation of K (``pion.client.rope``; V untouched), then the suffix. With
    ``recompute_ratio > 0`` a CacheBlend-style pass (``pion.client.blend``) then recomputes
    the tokens whose keys deviate most from a full prefill, to recover the cross-chunk
    attention that independent prefills lack.

Keys: the original design's separate, narrow namespace contract — a hash of the chunk (or pack) id, the
model identity (``model_fingerprint``: model id, config, rope, dtype), the storage format and,
for packs, the stub's token hash. Chunk ids must name content: re-ingesting an id replaces it.

Backends: ``"inproc"`` (tensors in a dict, bit-exact, one process) and ``"pion"`` (KV prefixes
in pion-server, fp16 by default, shared across processes; see ``pion.client.chunk_store``).

Failure: ``prepare``/``prepare_multi`` raise ``KeyError`` naming the chunks that are not held
(never ingested, evicted, server unreachable) — the caller re-ingests or falls back to
text-RAG. ``ingest`` raises ``redis.RedisError`` if the server refused a write.

Tokens, not strings: encode each chunk and the suffix separately and concatenate token ids
(``composed_ids``); the caches here hold exactly those tokens.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from typing import Any, Literal

import torch

from pion.client.blend import blend_recompute
from pion.client.chunk_store import ChunkKv, ChunkStore, InprocChunkStore, PionChunkStore
from pion.client.connection import DEFAULT_HOST, DEFAULT_PORT, PionClient
from pion.client.hybrid_prefix import hybrid_transport_for
from pion.client.namespaces import RAG_TAG, make_namespace, model_fingerprint, tokens_hash
from pion.client.rope import KeyRotator
from pion.client.runtimes.transformers_kv import KvShape, dynamic_cache
from pion.client.runtimes.transformers_runtime import cache_forward_kwargs, model_device
from pion.common.ids import Namespace

Backend = Literal["inproc", "pion"]


def cache_from_layers(config: Any, keys: list[torch.Tensor], values: list[torch.Tensor]) -> Any:
    """A transformers ``DynamicCache`` adopting per-layer ``[1, H, n, D]`` K/V (no copy; the
    assembly routine every restore uses, ``transformers_kv.dynamic_cache``, in the tensors' dtype)."""
    dtype = keys[0].dtype if keys else torch.float32
    return dynamic_cache(config, list(zip(keys, values, strict=True)), dtype)


class HybridRetrievalCache:
    """Prefilled K/V of RAG chunks, composed at request time.

    Args:
        model: a transformers causal LM with rotary positions (Llama family: SmolLM2, Llama, Qwen...).
        backend: ``"inproc"`` or ``"pion"``.
        vquant: storage format on the pion backend (a ``pion.codecs`` name; fp16 default).
        client: a ``PionClient`` to share (pion backend); else one is opened to host:port.
        recompute_ratio: fraction of composed chunk tokens recomputed by ``prepare_multi``
            (0 = off; CacheBlend uses ~0.15).
        recompute_layer: the early layer whose key deviation selects those tokens.

    Raises:
        UnsupportedRope: the model's rope cannot be re-rotated exactly (dynamic NTK, longrope).
        ValueError: the model has recurrent layers (a state cannot be split per chunk).
    """

    def __new__(cls, model: Any, *args: Any, **kwargs: Any) -> Any:
        """An mlx-lm model gets the MLX version (``pion.client.mlx_retrieval_cache``), same API."""
        mlx_nn = sys.modules.get("mlx.nn")  # an mlx model exists only once mlx is imported
        if cls is HybridRetrievalCache and mlx_nn is not None and isinstance(model, mlx_nn.Module):
            from pion.client.mlx_retrieval_cache import MlxHybridRetrievalCache

            cls = MlxHybridRetrievalCache  # a subclass: Python then runs its __init__ with these arguments
        return super().__new__(cls)

    def __init__(self, model: Any, backend: Backend = "inproc", vquant: str = "fp16",
                 client: PionClient | None = None, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 password: str | None = None, recompute_ratio: float = 0.0, recompute_layer: int = 1) -> None:
        if not 0.0 <= recompute_ratio <= 1.0:
            raise ValueError(f"recompute_ratio must be in 0..1, got {recompute_ratio}")
        self.model = model
        self.backend = backend
        self.vquant = vquant
        self.shape, self._fingerprint = self._describe_model(model)
        if not 0 <= recompute_layer < self.shape.n_layers:
            raise ValueError(f"recompute_layer must be in 0..{self.shape.n_layers - 1}, got {recompute_layer}")
        self.recompute_ratio = recompute_ratio
        self.recompute_layer = recompute_layer
        self._owns_client = False
        self.client: PionClient | None = None
        self.store: ChunkStore
        if backend == "inproc":
            self.store = InprocChunkStore()
        elif backend == "pion":
            if client is None:
                client, self._owns_client = PionClient(host, port, password), True
            self.client = client
            self.store = PionChunkStore(client, self.shape, vquant)
        else:
            raise ValueError(f"backend must be 'inproc' or 'pion', got {backend!r}")
        self._stub: ChunkKv | None = None
        self._stub_hash = "none"
        self.last_prepare_ms: dict[str, float] = {}

    def _describe_model(self, model: Any) -> tuple[KvShape, tuple[str, ...]]:
        """Check the model can be served, set up key re-rotation; (K/V geometry, key fingerprint).

        Called once by __init__; ``pion.client.mlx_retrieval_cache`` overrides it for mlx-lm.
        """
        if hybrid_transport_for(model) is not None:
            raise ValueError("the model has recurrent (SSM / linear-attention) layers, whose state cannot be "
                             "split into chunks or moved to new positions; use PionPromptCache for its prefixes")
        self.rotator = KeyRotator(model)
        return KvShape.from_config(model.config), model_fingerprint(model, None)

    # ---- keys -------------------------------------------------------------------------------

    def namespace_for(self, item_id: str, kind: str = "chunk") -> Namespace:
        """hash(chunk id) plus model identity and format; packs add the stub they follow."""
        stub = self._stub_hash if kind == "pack" else "-"
        chunk_hash = hashlib.sha256(item_id.encode()).hexdigest()
        return make_namespace(RAG_TAG, *self._fingerprint, f"format={self.vquant}", f"kind={kind}",
                              f"stub={stub}", f"id={chunk_hash}")

    # ---- ingest -----------------------------------------------------------------------------

    def ingest(self, chunk_id: str, token_ids: Sequence[int]) -> None:
        """Prefill the chunk alone at positions 0.. and keep its K/V under ``chunk_id``."""
        ids = _ids(token_ids, "token_ids")
        self.store.put(self.namespace_for(chunk_id), self._prefill(ids, None))

    def set_shared_stub(self, stub_ids: Sequence[int]) -> None:
        """Prefill the shared stub (system prompt, instructions) once; packs are prefilled after it."""
        ids = _ids(stub_ids, "stub_ids")
        self._stub = self._prefill(ids, None)
        self._stub_hash = tokens_hash(ids)

    def ingest_pack(self, pack_id: str, token_ids: Sequence[int]) -> None:
        """Prefill ``token_ids`` (one or more chunks, already concatenated) right after the stub."""
        if self._stub is None:
            raise ValueError("ingest_pack needs set_shared_stub() first")
        ids = _ids(token_ids, "token_ids")
        self.store.put(self.namespace_for(pack_id, "pack"), self._prefill(ids, self._stub))

    # ---- prepare ----------------------------------------------------------------------------

    def prepare(self, chunk_id: str, suffix_ids: Sequence[int]) -> tuple[Any, list[int]]:
        """(cache holding the chunk at positions 0.., suffix ids); KeyError if the chunk is not held."""
        (chunk,) = self._fetch([(chunk_id, self.namespace_for(chunk_id), 0)])
        keys, values = self._to_model(chunk.keys), self._to_model(chunk.values)
        return cache_from_layers(self.model.config, keys, values), _ids(suffix_ids, "suffix_ids")

    def prepare_multi(self, ids: Sequence[str], suffix_ids: Sequence[int],
                      max_packs: int = 8) -> tuple[Any, list[int]]:
        """(cache holding stub + each pack/chunk at its new position, suffix ids).

        ``ids`` name packs (``ingest_pack``, looked up first when a stub is set) or chunks
        (``ingest``). Raises ValueError beyond ``max_packs`` and KeyError for ids not held.
        """
        if not ids:
            raise ValueError("prepare_multi needs at least one id")
        if len(ids) > max_packs:
            raise ValueError(f"{len(ids)} packs exceed max_packs={max_packs}; compose fewer, coarser packs")
        items = self._resolve(list(ids))
        stub = self._stub
        parts = [] if stub is None else [stub]
        pos = 0 if stub is None else stub.n_tokens
        keys: list[list[torch.Tensor]] = [[] for _ in range(self.shape.n_layers)]
        values: list[list[torch.Tensor]] = [[] for _ in range(self.shape.n_layers)]
        if stub is not None:
            for layer in range(self.shape.n_layers):
                keys[layer].append(self._to_model([stub.keys[layer]])[0])
                values[layer].append(self._to_model([stub.values[layer]])[0])
        for chunk in items:
            delta = pos - chunk.base_pos
            for layer in range(self.shape.n_layers):
                k = self._to_model([chunk.keys[layer]])[0]
                keys[layer].append(self.rotator.rotate(k, delta))
                values[layer].append(self._to_model([chunk.values[layer]])[0])
            pos += chunk.n_tokens
            parts.append(chunk)
        cache = cache_from_layers(self.model.config, [torch.cat(k, dim=2) for k in keys],
                                  [torch.cat(v, dim=2) for v in values])
        if self.recompute_ratio > 0:
            # Parts still at the position they were prefilled at (the stub, a first pack right after
            # it) are exact already; recompute only from the first moved part on.
            start = 0
            for part in parts:
                if part.base_pos != start:
                    break
                start += part.n_tokens
            all_ids = [t for part in parts for t in part.token_ids]
            if start < len(all_ids):
                blend_recompute(self.model, cache, all_ids, start, self.recompute_ratio, self.recompute_layer)
        return cache, _ids(suffix_ids, "suffix_ids")

    def composed_ids(self, ids: Sequence[str]) -> list[int]:
        """The token ids ``prepare_multi(ids, …)`` puts in its cache (stub, then each part) —
        the prompt a text-RAG baseline prefills."""
        stub = [] if self._stub is None else list(self._stub.token_ids)
        return stub + [t for chunk in self._resolve(list(ids)) for t in chunk.token_ids]

    # ---- internals --------------------------------------------------------------------------

    def _resolve(self, ids: list[str]) -> list[ChunkKv]:
        """Each id as a pack (when a stub is set) or else a chunk; KeyError lists what is missing."""
        stub_len = 0 if self._stub is None else self._stub.n_tokens
        candidates: list[tuple[str, Namespace, int]] = []
        if self._stub is not None:
            candidates += [(i, self.namespace_for(i, "pack"), stub_len) for i in ids]
        candidates += [(i, self.namespace_for(i), 0) for i in ids]
        found = self.store.get_many([(ns, base) for _, ns, base in candidates])
        by_id: dict[str, ChunkKv] = {}
        for (item_id, _, _), chunk in zip(candidates, found, strict=True):
            if chunk is not None and item_id not in by_id:
                by_id[item_id] = chunk
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise KeyError(f"not held (never ingested, evicted, or server unreachable): {missing}")
        return [by_id[i] for i in ids]

    def _fetch(self, items: list[tuple[str, Namespace, int]]) -> list[ChunkKv]:
        found = self.store.get_many([(ns, base) for _, ns, base in items])
        missing = [item_id for (item_id, _, _), chunk in zip(items, found, strict=True) if chunk is None]
        if missing:
            raise KeyError(f"not held (never ingested, evicted, or server unreachable): {missing}")
        return [c for c in found if c is not None]

    def _to_model(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        device, dtype = model_device(self.model), next(self.model.parameters()).dtype
        return [t.to(device=device, dtype=dtype) for t in tensors]

    @torch.inference_mode()
    def _prefill(self, ids: list[int], after: ChunkKv | None) -> ChunkKv:
        """Prefill ``ids`` (after ``after``'s K/V when given) and keep only their own K/V."""
        start = 0 if after is None else after.n_tokens
        cache: Any = None if after is None else cache_from_layers(
            self.model.config, [k.clone() for k in after.keys], [v.clone() for v in after.values])
        from transformers import DynamicCache

        cache = cache if cache is not None else DynamicCache(config=self.model.config)
        input_ids = torch.tensor([ids], dtype=torch.long, device=model_device(self.model))
        self.model(input_ids=input_ids, use_cache=True, logits_to_keep=1, **cache_forward_kwargs(self.model, cache))
        keys = [layer.keys[:, :, start:].contiguous() for layer in cache.layers]
        values = [layer.values[:, :, start:].contiguous() for layer in cache.layers]
        return ChunkKv(keys, values, ids, start)

    def close(self) -> None:
        """Close the connection if this cache opened it."""
        if self.client is not None and self._owns_client:
            self.client.close()
        self.client = None

    def __enter__(self) -> HybridRetrievalCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ids(token_ids: Sequence[int], what: str) -> list[int]:
    ids = [int(t) for t in token_ids]
    if not ids:
        raise ValueError(f"{what} is empty")
    return ids
