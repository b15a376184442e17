"""PionConnector: vLLM V1's KV connector API over pion-server, loaded out of tree.

    vllm serve <model> --kv-transfer-config '{"kv_connector": "PionConnector",
        "kv_connector_module_path": "pion.integrations.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"host": "127.0.0.1", "port": 1974, "vquant": "auto"}}'

Every full block of ``block_size`` prompt tokens is one Pion KV prefix, named by Pion's chained
block hash (``pion.client.block_hashes``: equal hashes mean equal *prefixes*)::

    model_ns = make_namespace("pion-vllm-v1", "model=<model>", "world=<tp size>", "worker=<tp rank>",
                              "dtype=<kv dtype>", "L<layers>", "D<kv_dim>", "format=<fmt>")
    block    = "vllm:<model_ns>:<block hash, 16 hex>"   (KV.PREFIX.REGISTER … LAYERS <layers>
                                                       BLOCKS <block_size> 1 <hash>)

Roles (vLLM ``kv_connector/v1/base.py``), by when vLLM calls them:

Scheduler side (one instance in the scheduler process):
  * ``get_num_new_matched_tokens`` — when a request is scheduled, possibly several times: one
    pipelined ``KV.PREFIX.LOOKUP`` of the prompt's blocks (the last prompt token is always computed,
    so at most ``len(prompt) - 1`` tokens, block-aligned), counting the leading hits. Memoized per
    request, so the receipt (``PION.STATS`` hits and tokens) is credited once per request.
  * ``update_state_after_alloc`` — after vLLM allocated blocks: remembers which to fill.
  * ``build_connector_meta`` — once per step: for each new request, the blocks to load (hits
    beyond vLLM's own prefix cache) and the full prompt blocks to store (the rest).
  * ``request_finished`` — forgets the request; blocks are never held back (saves are synchronous).

Worker side (one instance per worker):
  * ``register_kv_caches`` — once: the paged tensors and their layout (``layout.py``; the CPU
    attention backend's layout; others are refused with the shape).
  * ``start_load_kv`` — before the forward pass: all loads of the step in one round trip of
    ``V.MFETCH`` (two per block), scattered into the paged cache; ``wait_for_layer_load`` is a
    no-op because everything is in place before the first layer runs.
  * ``save_kv_layer`` — a no-op: ``wait_for_save``, after the forward pass, gathers every new
    block of every layer from the paged cache and stores them in one pipelined round trip.

Failures: the scheduler treats an unreachable server as a miss (0 tokens). A load that fails on the
worker raises (vLLM's ``kv_load_failure_policy`` decides); a failed save is logged and dropped
(a later request recomputes).
``pion-server -w N``: redirects are followed by ``KvChunkStore`` (per owner, once).
Not done yet: MLA, hybrid (HMA) models, chunked prefills
that store a prompt over several steps (only blocks computed in the request's first step are
stored), layouts other than CPU_ATTN.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from pion.client.block_hashes import block_hashes
from pion.client.connection import DEFAULT_HOST, DEFAULT_PORT, PionClient
from pion.common.ids import Namespace
from pion.integrations.kv_chunks import VLLM_NAMES, ChunkGeometry, KvChunkStore, ModelKey
from pion.integrations.vllm.layout import CpuAttnLayout, layout_for

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)


@dataclass
class BlockTransfer:
    """Blocks of one request to move: Pion block hashes and vLLM block ids, in the same order.

    Hashes, not namespaces: each worker names a block with its own tensor-parallel rank.
    """

    req_id: str
    hashes: list[int]
    block_ids: list[int]


@dataclass
class PionConnectorMetadata(KVConnectorMetadata):
    """What the scheduler tells the workers for one step."""

    loads: list[BlockTransfer] = field(default_factory=list)
    stores: list[BlockTransfer] = field(default_factory=list)


@dataclass
class _Planned:
    """Scheduler-side state of a request between lookup and its first step."""

    hashes: list[int]
    hit_blocks: int
    local_tokens: int = 0  # vLLM's own prefix-cache hit at the last lookup (block-aligned)
    load_from_block: int = 0
    load_blocks: int = 0


class PionConnector(KVConnectorBase_V1):
    """vLLM's K/V blocks as Pion KV prefixes (see the module docstring)."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        model_config, parallel = vllm_config.model_config, vllm_config.parallel_config
        self.block_size = int(vllm_config.cache_config.block_size)
        self.n_kv_heads = int(model_config.get_num_kv_heads(parallel))
        self.head_dim = int(model_config.get_head_size())
        n_layers = int(model_config.get_num_layers(parallel))
        dtype = model_config.dtype if isinstance(model_config.dtype, torch.dtype) else torch.bfloat16
        self.geometry = ChunkGeometry(n_layers, self.n_kv_heads * self.head_dim, self.block_size, dtype)
        self.client = PionClient(str(extra.get("host", DEFAULT_HOST)), int(extra.get("port", DEFAULT_PORT)),
                                 extra.get("password"), socket_timeout_s=float(extra.get("socket_timeout_s", 30)))
        self.store = KvChunkStore(self.client, self.geometry, str(extra.get("vquant", "auto")), VLLM_NAMES)
        self.model = ModelKey(str(model_config.model), int(parallel.tensor_parallel_size), int(parallel.rank), str(dtype))
        self._planned: dict[str, _Planned] = {}
        self._kv_caches: list[torch.Tensor] = []
        self._layout: CpuAttnLayout | None = None
        logger.info("PionConnector (%s): %d layers x kv_dim %d, blocks of %d, %s stored as %s", role.name,
                    n_layers, self.geometry.kv_dim, self.block_size, dtype, self.store.format)

    # ---- scheduler side --------------------------------------------------------------------------

    def _namespaces(self, hashes: list[int]) -> list[Namespace]:
        """Block names for this process's rank (the scheduler is rank 0: it looks up rank 0's blocks)."""
        return [self.store.chunk_namespace(self.model, h) for h in hashes]

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        planned = self._planned.get(request.request_id)
        if planned is None:
            prompt = list(request.prompt_token_ids or [])
            hashes = [int(h) for h in block_hashes(prompt, self.block_size)]
            lookable = max(len(prompt) - 1, 0) // self.block_size
            try:
                hits = self.store.count_leading(self._namespaces(hashes[:lookable]))
            except Exception as exc:  # the server is down: a miss, never a failed request
                logger.warning("pion-server lookup failed (%s); request %s runs uncached", exc, request.request_id)
                hits = 0
            planned = _Planned(hashes, hits)
            self._planned[request.request_id] = planned
            if hits:
                logger.info("Pion external hit: %d of %d prompt tokens for request %s", hits * self.block_size,
                            len(prompt), request.request_id)
        planned.local_tokens = num_computed_tokens
        return max(planned.hit_blocks * self.block_size - num_computed_tokens, 0), False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        planned = self._planned.get(request.request_id)
        if planned is None or num_external_tokens <= 0:
            return
        planned.load_from_block = planned.local_tokens // self.block_size
        planned.load_blocks = num_external_tokens // self.block_size

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = PionConnectorMetadata()
        for new_req in scheduler_output.scheduled_new_reqs:
            planned = self._planned.get(new_req.req_id)
            if planned is None:
                continue
            block_ids = list(new_req.block_ids[0])
            first, n_load = planned.load_from_block, planned.load_blocks
            if n_load:
                meta.loads.append(BlockTransfer(new_req.req_id, planned.hashes[first:first + n_load],
                                                block_ids[first:first + n_load]))
            done_tokens = new_req.num_computed_tokens + scheduler_output.num_scheduled_tokens.get(new_req.req_id, 0)
            start = max(planned.hit_blocks, new_req.num_computed_tokens // self.block_size)
            stop = min(done_tokens // self.block_size, len(planned.hashes), len(block_ids))
            if stop > start:
                meta.stores.append(BlockTransfer(new_req.req_id, planned.hashes[start:stop], block_ids[start:stop]))
            planned.load_blocks = 0
        return meta

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._planned.pop(request.request_id, None)
        return False, None

    # ---- worker side -----------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._kv_caches = list(kv_caches.values())  # vLLM registers them in layer order
        if len(self._kv_caches) != self.geometry.n_layers:
            raise ValueError(f"PionConnector expected {self.geometry.n_layers} attention layers, "
                             f"vLLM registered {len(self._kv_caches)}")
        self._layout = layout_for(self._kv_caches[0], self.n_kv_heads, self.head_dim, self.block_size)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, PionConnectorMetadata) or not meta.loads or self._layout is None:
            return
        names = [ns for load in meta.loads for ns in self._namespaces(load.hashes)]
        fetched = self.store.fetch_many(names)
        missing = [ns for ns, chunk in zip(names, fetched, strict=True) if chunk is None]
        if missing:
            raise RuntimeError(f"PionConnector: {len(missing)} blocks vanished between lookup and load "
                               f"(first: {missing[0]})")
        position = 0
        for load in meta.loads:
            n = len(load.hashes)
            rows = torch.empty((2, self.geometry.n_layers, n * self.block_size, self.geometry.kv_dim),
                               dtype=self.geometry.dtype)
            for i in range(n):
                chunk = fetched[position + i]
                assert chunk is not None  # checked above
                block = rows[:, :, i * self.block_size:(i + 1) * self.block_size]
                part = torch.empty((2, self.geometry.n_layers, self.block_size, self.geometry.kv_dim),
                                   dtype=self.geometry.dtype)
                self.store.copy_into(chunk, part)
                block.copy_(part)
            for layer, cache in enumerate(self._kv_caches):
                self._layout.scatter(cache, load.block_ids, rows[:, layer])
            position += n
        logger.info("PionConnector loaded %d blocks for %d requests", len(names), len(meta.loads))

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv filled every layer before the forward pass

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: AttentionMetadata,
                      **kwargs: Any) -> None:
        return  # gathered once per step in wait_for_save (one round trip for all layers)

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, PionConnectorMetadata) or not meta.stores or self._layout is None:
            return
        chunks: list[tuple[Namespace, torch.Tensor]] = []
        for store in meta.stores:
            per_layer = [self._layout.gather(cache, store.block_ids) for cache in self._kv_caches]
            rows = torch.stack(per_layer, dim=1)  # [2, layers, n * block_size, kv_dim]
            for i, ns in enumerate(self._namespaces(store.hashes)):
                chunks.append((ns, rows[:, :, i * self.block_size:(i + 1) * self.block_size].contiguous()))
        try:
            self.store.put_many(self.model, chunks)
        except Exception as exc:  # a lost save is a later miss, never a failed step
            logger.warning("PionConnector: storing %d blocks failed: %s", len(chunks), exc)

    def shutdown(self) -> None:
        self.client.close()
