"""Engine K/V chunks as Pion KV prefixes: namespaces, row layout and one-round-trip pipelines.

Shared by both integrations: an LMCache chunk (``MemoryFormat.KV_2LTD``, tag ``pion-lmcache-v1``,
key prefix ``lmc``) and a vLLM block gathered from the paged cache (tag ``pion-vllm-v1``, prefix
``vllm``) are both one tensor ``[2, n_layers, n_tokens, kv_dim]`` (side 0 keys, side 1 values). Each ``[n_tokens, kv_dim]`` slice is exactly the V-store's row layout
(one row per token, heads concatenated), so a layer travels as one ``V.STOREBATCH`` blob and comes
back as one bulk string of ``V.MFETCH``; fp16 and fp32 layers are sent and restored without a copy.

Namespaces (derivation version 1, ``pion.client.namespaces.make_namespace``)::

    model_ns = make_namespace("<tag>", "model=<model_name>", "world=<world_size>",
                              "worker=<worker_id>", "dtype=<kv dtype>", "L<n_layers>", "D<kv_dim>",
                              "format=<storage format>")
    chunk    = "<prefix>:<model_ns>:<chunk hash, 16 hex>"     (":<sha256(tags)[:16]>" appended when
                                                               LMCache tags the key)
    manifest = "<prefix>:<model_ns>:model"  -> JSON {version, model_name, world_size, worker_id, dtype,
                                                n_layers, kv_dim, chunk_size, format}

so one model's chunks are ``V.LIST <prefix>:<model_ns>:*`` and a reader with another geometry, dtype or
storage format never sees them (a mismatch would be silent corruption, not an error).

Per chunk on the wire (all chunks of a batch in one pipelined round trip):
``KV.PREFIX.REGISTER <chunk> <kv_dim> <format> LAYERS <n_layers>`` then one ``V.STOREBATCH`` per
layer and side (``DTYPE f16``; ``f32`` for an fp32 session). ``KV.PREFIX.LOOKUP`` answers +HIT only
once every layer of both sides is stored, so a reader never restores a half-written chunk. Restores
are two ``V.MFETCH … RANGE 0 <chunk_size> DTYPE raw`` per chunk; a chunk shorter than LMCache's
chunk size (``save_unfull_chunk``) answers -ERR for that range and costs one more round trip
(``V.INFO`` for its length, then the fetch).

Storage format ``auto``: fp16 for fp16 K/V (bit-exact), fp32 for bf16 and fp32 K/V (bf16 widens to
fp32 exactly; fp16 would round it). Any other codec (fp8, int8, turbo*, ...) is lossy by design.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
import torch

from pion.client.connection import FetchDtype, PionClient, PionPipeline
from pion.client.namespaces import make_namespace
from pion.client.prefix_transport import LayerFormats, PrefixTransport, RowSource, Side, decode_layer
from pion.client.redirect import parse_redirect
from pion.client.runtimes.transformers_kv import KvShape
from pion.common.ids import Namespace, k_session

logger = logging.getLogger(__name__)

LMCACHE_NAMES = ("pion-lmcache-v1", "lmc")  # (namespace tag, key prefix)
VLLM_NAMES = ("pion-vllm-v1", "vllm")
MANIFEST_VERSION = 1
# Formats whose rows are floats the K/V dtype converts to and from without rounding.
_EXACT_FORMAT = {torch.float16: "fp16", torch.float32: "fp32", torch.bfloat16: "fp32"}


def resolve_format(vquant: str, dtype: torch.dtype) -> str:
    """The storage format for ``vquant`` (``auto`` = the exact float format for ``dtype``)."""
    if vquant != "auto":
        return vquant
    if dtype not in _EXACT_FORMAT:
        raise ValueError(f"no exact Pion format for K/V dtype {dtype}; pass vquant explicitly")
    return _EXACT_FORMAT[dtype]


@dataclass(frozen=True)
class ChunkGeometry:
    """What every chunk of one LMCache engine looks like (``LMCacheMetadata``'s kv_shape)."""

    n_layers: int
    kv_dim: int
    chunk_size: int
    dtype: torch.dtype

    def shape(self, n_tokens: int) -> tuple[int, int, int, int]:
        """A chunk tensor's shape, ``[2, n_layers, n_tokens, kv_dim]``."""
        return (2, self.n_layers, n_tokens, self.kv_dim)


@dataclass(frozen=True)
class ModelKey:
    """The fields of LMCache's ``CacheEngineKey`` that name a model's K/V (all but the chunk hash)."""

    model_name: str
    world_size: int
    worker_id: int
    dtype: str


@dataclass
class FetchedChunk:
    """One chunk's V.MFETCH replies (raw stored rows per layer) and its token count."""

    ns: str
    n_tokens: int
    k_layers: Sequence[bytes]
    v_layers: Sequence[bytes]


class KvChunkStore:
    """Stores and restores K/V chunks of one geometry in one storage format.

    Args:
        client: the connection to pion-server (its pipelines carry every batch).
        geometry: layers, kv_dim, chunk size and K/V dtype of the engine's chunks.
        vquant: storage format (``auto``, ``fp16``, ``fp32``, ``fp8``, ``int8``, ...).
        names: (namespace tag, key prefix): ``LMCACHE_NAMES`` or ``VLLM_NAMES``.

    Raises:
        ValueError: an unknown format, or a kv_dim the format cannot store.
    """

    def __init__(self, client: PionClient, geometry: ChunkGeometry, vquant: str = "auto",
                 names: tuple[str, str] = LMCACHE_NAMES) -> None:
        self.tag, self.key_prefix = names
        self.client = client
        self.geometry = geometry
        self.format = resolve_format(vquant, geometry.dtype)
        # n_kv_heads x head_dim only matters for transformers caches; rows need kv_dim alone.
        self.shape = KvShape(geometry.n_layers, 1, geometry.kv_dim)
        self.transport = PrefixTransport(client, self.shape, LayerFormats.uniform(self.format, geometry.n_layers))
        self._registered: set[Namespace] = set()

    # ---- names ---------------------------------------------------------------------------------

    def model_namespace(self, model: ModelKey) -> Namespace:
        g = self.geometry
        return make_namespace(self.tag, f"model={model.model_name}", f"world={model.world_size}",
                              f"worker={model.worker_id}", f"dtype={g.dtype}", f"L{g.n_layers}", f"D{g.kv_dim}",
                              f"format={self.format}")

    def chunk_namespace(self, model: ModelKey, chunk_hash: int, tags: Sequence[object] = ()) -> Namespace:
        name = f"{self.key_prefix}:{self.model_namespace(model)}:{chunk_hash & 0xFFFFFFFFFFFFFFFF:016x}"
        if tags:
            name += ":" + hashlib.sha256(repr(tuple(tags)).encode()).hexdigest()[:16]
        return Namespace(name)

    def manifest(self, model: ModelKey) -> dict[str, object]:
        g = self.geometry
        return {"version": MANIFEST_VERSION, "model_name": model.model_name, "world_size": model.world_size,
                "worker_id": model.worker_id, "dtype": str(g.dtype), "n_layers": g.n_layers, "kv_dim": g.kv_dim,
                "chunk_size": g.chunk_size, "format": self.format}

    def _queue_manifest(self, pipe: PionPipeline, model: ModelKey) -> None:
        model_ns = self.model_namespace(model)
        if model_ns not in self._registered:
            pipe.key_set(f"{self.key_prefix}:{model_ns}:model", json.dumps(self.manifest(model), sort_keys=True))

    # ---- store ---------------------------------------------------------------------------------

    def put_many(self, model: ModelKey, chunks: Sequence[tuple[Namespace, torch.Tensor]]) -> int:
        """Register and store every chunk in one round trip; returns the row bytes sent.

        Raises:
            ValueError: a chunk tensor of the wrong shape (nothing is sent).
            redis.RedisError: the connection failed, or the server refused a command (the error
                names the chunk; LOOKUP never answers +HIT for a chunk that did not fully land).
        """
        for ns, tensor in chunks:
            self._check_tensor(ns, tensor)
        pipe = self.client.pipeline()
        self._queue_manifest(pipe, model)
        nbytes = 0
        owners: list[Namespace | None] = [None] * len(pipe)
        for ns, tensor in chunks:
            nbytes += self.transport.queue_store(pipe, ns, _row_source(tensor))
            owners.extend([ns] * (len(pipe) - len(owners)))
        replies = pipe.execute(raise_on_error=False)
        # Under -w N a chunk another process stored lives on its worker: the same content (the name
        # is its hash) is already held, so a redirect is not a failure.
        failed = {owner: reply for owner, reply in zip(owners, replies, strict=True)
                  if isinstance(reply, Exception) and parse_redirect(reply) is None}
        if failed:
            # The pipeline ran on past the refusal (a REGISTER refused for another geometry lets the
            # rows land in the old sessions): drop what was written so no reader restores it.
            self.drop([ns for ns in failed if ns is not None])
            owner, reply = next(iter(failed.items()))
            raise redis.ResponseError(f"storing LMCache chunk {owner or 'manifest'} failed: {reply}")
        self._registered.add(self.model_namespace(model))
        return nbytes

    def _check_tensor(self, ns: Namespace, tensor: torch.Tensor) -> None:
        n_tokens = tensor.shape[2] if tensor.dim() == 4 else 0
        if tuple(tensor.shape) != self.geometry.shape(n_tokens) or not 0 < n_tokens <= self.geometry.chunk_size:
            raise ValueError(f"chunk {ns} has shape {tuple(tensor.shape)}, expected "
                             f"{self.geometry.shape(self.geometry.chunk_size)} with 1..{self.geometry.chunk_size} tokens")

    # ---- lookup --------------------------------------------------------------------------------

    def count_leading(self, namespaces: Sequence[Namespace]) -> int:
        """How many chunks from the first are complete on the server (one round trip)."""
        if not namespaces:
            return 0
        pipe = self.client.pipeline()
        for ns in namespaces:
            pipe.kv_prefix_lookup(ns)
        hits = pipe.execute(raise_on_error=False)
        for i, hit in enumerate(hits):
            if hit is not True:
                return i
        return len(hits)

    # ---- restore -------------------------------------------------------------------------------

    def fetch_many(self, namespaces: Sequence[Namespace]) -> list[FetchedChunk | None]:
        """Every chunk's rows, None where a chunk is not held; one round trip for full chunks.

        Raises:
            redis.RedisError: the connection failed (a missing chunk is None, not an error).
        """
        full = self.geometry.chunk_size
        pipe = self.client.pipeline()
        for ns in namespaces:
            self.transport.queue_fetch(pipe, ns, full)
        replies = pipe.execute(raise_on_error=False)
        self._follow_redirects(namespaces, replies, full)
        out: list[FetchedChunk | None] = []
        short: list[int] = []
        for i, ns in enumerate(namespaces):
            k_reply, v_reply = replies[2 * i], replies[2 * i + 1]
            if isinstance(k_reply, Exception) or isinstance(v_reply, Exception):
                out.append(None)
                short.append(i)
            else:
                out.append(FetchedChunk(ns, full, k_reply, v_reply))
        if short:
            self._fetch_short(namespaces, short, out)
        return out

    def _follow_redirects(self, namespaces: Sequence[Namespace], replies: list[Any], n_tokens: int) -> None:
        """Under ``pion-server -w N``: refetch chunks answered ``session lives on worker N`` there.

        Chunks stored by other processes can live on different workers, so each owner gets one
        round trip (the client moves to it, ``PionClient.follow_redirect``); ``replies`` is updated
        in place. A chunk redirected again is left as the error (a miss).
        """
        seen: set[tuple[str, int]] = set()
        while True:
            pending = [i for i in range(len(namespaces)) if parse_redirect(replies[2 * i]) is not None]
            target = parse_redirect(replies[2 * pending[0]]) if pending else None
            if target is None or (target.host, target.port) in seen:
                return
            seen.add((target.host, target.port))
            self.client.follow_redirect(replies[2 * pending[0]])
            mine = [i for i in pending if parse_redirect(replies[2 * i]) == target]
            pipe = self.client.pipeline()
            for i in mine:
                self.transport.queue_fetch(pipe, namespaces[i], n_tokens)
            again = pipe.execute(raise_on_error=False)
            for j, i in enumerate(mine):
                replies[2 * i], replies[2 * i + 1] = again[2 * j], again[2 * j + 1]

    def _fetch_short(self, namespaces: Sequence[Namespace], indexes: list[int],
                     out: list[FetchedChunk | None]) -> None:
        """Chunks that refused the full range: shorter ones (their length from V.INFO) or absent."""
        pipe = self.client.pipeline()
        for i in indexes:
            pipe.v_info(k_session(namespaces[i]))
        lengths: dict[int, int] = {}
        for i, info in zip(indexes, pipe.execute(raise_on_error=False), strict=True):
            if not isinstance(info, Exception) and 0 < int(info.get("tokens", 0)) < self.geometry.chunk_size:
                lengths[i] = int(info["tokens"])
        if not lengths:
            return
        for i, n_tokens in lengths.items():
            self.transport.queue_fetch(pipe, namespaces[i], n_tokens)
        replies = pipe.execute(raise_on_error=False)
        for j, (i, n_tokens) in enumerate(lengths.items()):
            k_reply, v_reply = replies[2 * j], replies[2 * j + 1]
            if not isinstance(k_reply, Exception) and not isinstance(v_reply, Exception):
                out[i] = FetchedChunk(namespaces[i], n_tokens, k_reply, v_reply)

    def copy_into(self, chunk: FetchedChunk, dst: torch.Tensor) -> None:
        """Decode ``chunk`` into ``dst`` ``[2, n_layers, chunk.n_tokens, kv_dim]`` (any float dtype).

        Raises:
            ValueError: ``dst`` or a reply has the wrong size (``dst`` may be partly written).
        """
        g = self.geometry
        if tuple(dst.shape) != g.shape(chunk.n_tokens):
            raise ValueError(f"destination shape {tuple(dst.shape)} != {g.shape(chunk.n_tokens)}")
        sides: tuple[tuple[int, Side, Sequence[bytes], FetchDtype], ...] = (
            (0, "k", chunk.k_layers, self.transport.k_wire), (1, "v", chunk.v_layers, self.transport.v_wire))
        for index, side, layers, wire in sides:
            if len(layers) != g.n_layers:
                raise ValueError(f"chunk {chunk.ns}: {len(layers)} {side} layers, expected {g.n_layers}")
            for layer, data in enumerate(layers):
                flat = decode_layer(data, self.format, wire, g.kv_dim).reshape(-1)
                if flat.numel() != chunk.n_tokens * g.kv_dim:
                    raise ValueError(f"chunk {chunk.ns}: layer {layer} {side} has {flat.numel()} values, "
                                     f"expected {chunk.n_tokens * g.kv_dim}")
                dst[index, layer].view(-1).copy_(flat)

    # ---- housekeeping --------------------------------------------------------------------------

    def drop(self, namespaces: Sequence[Namespace]) -> int:
        """Remove chunks (both sides and their registration); returns how many were held."""
        return self.client.kv_prefix_drop(*namespaces) if namespaces else 0

    def list_chunks(self, model: ModelKey) -> list[str]:
        """The namespaces of every chunk held for ``model``."""
        pattern = f"{self.key_prefix}:{self.model_namespace(model)}:*_pk"
        sids = self.client.redis.execute_command("V.LIST", pattern)
        return sorted((s.decode() if isinstance(s, bytes) else str(s))[:-3] for s in sids)


def _row_source(tensor: torch.Tensor) -> RowSource:
    """A ``RowSource`` over a ``[2, n_layers, n_tokens, kv_dim]`` chunk tensor."""
    def rows(side: Side, layer: int, dtype: torch.dtype) -> np.ndarray:
        return tensor[0 if side == "k" else 1, layer].to(device="cpu", dtype=dtype).contiguous().numpy()
    return rows
