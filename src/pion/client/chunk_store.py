"""Where HybridRetrievalCache keeps each chunk's K/V: in this process, or in pion-server.

Roles:
  * ``ChunkKv`` — one prefilled chunk: per-layer K and V ``[1, n_kv_heads, n, head_dim]``,
    the token ids, and ``base_pos``, the position its first token was prefilled at.
  * ``InprocChunkStore`` — a dict of tensors (bit-exact; one process).
  * ``PionChunkStore`` — one KV prefix per chunk, written in one pipelined round trip
    (``KV.PREFIX.DROP`` + ``KV.PREFIX.REGISTER … LAYERS n`` + a ``V.STOREBATCH`` per layer and
    side + ``SET <ns>:ids``), read back in one more (``V.MFETCH`` K and V per chunk); a process
    that did not ingest the chunk first reads its token ids (``GET <ns>:ids``, u32 LE). The
    register, the rows and their decoding are ``pion.client.prefix_transport``'s (the transport
    of PionPromptCache and pion-llm), with ``restore_dtype="f16"``: a quantized chunk is decoded
    by the server into fp16, so prepared chunks hold exactly the values they held before.

``put`` replaces a chunk of the same key; ``get_many`` returns None for a chunk that is not
held (never ingested, evicted, or the server is unreachable — the caller decides).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import redis
import torch

from pion.client.connection import PionClient
from pion.client.prefix_transport import LayerFormats, PrefixTransport, Side
from pion.client.runtimes.transformers_kv import KvShape
from pion.common.ids import Namespace

logger = logging.getLogger(__name__)


@dataclass
class ChunkKv:
    """One chunk's K/V as prefilled at ``base_pos .. base_pos + n_tokens - 1``."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    token_ids: list[int]
    base_pos: int

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class ChunkStore(Protocol):
    """Keeps ChunkKv by namespace."""

    def put(self, ns: Namespace, chunk: ChunkKv) -> None:
        ...

    def get_many(self, items: Sequence[tuple[Namespace, int]]) -> list[ChunkKv | None]:
        """``(namespace, base_pos)`` pairs -> chunks in the same order (None where not held)."""
        ...


class InprocChunkStore:
    """Chunks as tensors in a dict (copies: the caller may keep extending its own cache)."""

    def __init__(self) -> None:
        self._chunks: dict[Namespace, ChunkKv] = {}

    def put(self, ns: Namespace, chunk: ChunkKv) -> None:
        self._chunks[ns] = ChunkKv([k.clone() for k in chunk.keys], [v.clone() for v in chunk.values],
                                   list(chunk.token_ids), chunk.base_pos)

    def get_many(self, items: Sequence[tuple[Namespace, int]]) -> list[ChunkKv | None]:
        return [self._chunks.get(ns) for ns, _ in items]


def _ids_key(ns: Namespace) -> str:
    return f"{ns}:ids"


class PionChunkStore:
    """Chunks as KV prefixes in pion-server (fp16 or fp32 on the wire, ``vquant`` at rest)."""

    def __init__(self, client: PionClient, shape: KvShape, vquant: str) -> None:
        self.client = client
        self.shape = shape
        self.vquant = vquant
        self.transport = PrefixTransport(client, shape, LayerFormats.uniform(vquant, shape.n_layers),
                                         restore_dtype="f16")
        self._ids: dict[Namespace, list[int]] = {}  # token ids of chunks this process has seen

    def put(self, ns: Namespace, chunk: ChunkKv) -> None:
        """Replace ``ns`` on the server; raises redis.RedisError when any write is refused."""
        shape, n = self.shape, chunk.n_tokens

        def rows(side: Side, layer: int, dtype: torch.dtype) -> np.ndarray:
            states = (chunk.keys if side == "k" else chunk.values)[layer]
            return states[0].transpose(0, 1).reshape(n, shape.kv_dim).to("cpu", dtype).contiguous().numpy()

        pipe = self.client.pipeline()
        pipe.kv_prefix_drop(ns)
        self.transport.queue_store(pipe, ns, rows, admit=True)  # an ingest, not a cache fill: never deferred
        pipe.key_set(_ids_key(ns), np.asarray(chunk.token_ids, dtype="<u4").tobytes())
        errors = [r for r in pipe.execute(raise_on_error=False) if isinstance(r, Exception)]
        if errors:
            raise redis.ResponseError(f"storing chunk {ns} failed ({len(errors)} errors, first: {errors[0]})")
        self._ids[ns] = list(chunk.token_ids)

    def get_many(self, items: Sequence[tuple[Namespace, int]]) -> list[ChunkKv | None]:
        """Every chunk in at most two round trips (one when this process knows their lengths)."""
        try:
            self._learn_ids([ns for ns, _ in items if ns not in self._ids])
            wanted = [(ns, base) for ns, base in items if ns in self._ids]
            pipe = self.client.pipeline()
            for ns, _ in wanted:
                self.transport.queue_fetch(pipe, ns, len(self._ids[ns]))
            replies = pipe.execute(raise_on_error=False) if wanted else []
        except redis.RedisError as exc:
            logger.warning("fetching %d chunks from pion-server failed: %s", len(items), exc)
            return [None] * len(items)
        found: dict[Namespace, ChunkKv] = {}
        for i, (ns, base) in enumerate(wanted):
            k_reply, v_reply = replies[2 * i], replies[2 * i + 1]
            if isinstance(k_reply, Exception) or isinstance(v_reply, Exception):
                self._ids.pop(ns, None)  # evicted: forget its length so a re-ingest is looked up again
                continue
            ids = self._ids[ns]
            try:
                restored = self.transport.decode(k_reply, v_reply, len(ids))
            except ValueError as exc:
                logger.warning("chunk %s has unexpected rows (%s); treated as missing", ns, exc)
                self._ids.pop(ns, None)
                continue
            keys = [t for t in restored.keys if t is not None]
            values = [t for t in restored.values if t is not None]
            found[ns] = ChunkKv(keys, values, ids, base)
        return [found.get(ns) for ns, _ in items]

    def _learn_ids(self, namespaces: list[Namespace]) -> None:
        if not namespaces:
            return
        pipe = self.client.pipeline()
        for ns in namespaces:
            pipe.key_get(_ids_key(ns))
        for ns, blob in zip(namespaces, pipe.execute(), strict=True):
            if blob:
                self._ids[ns] = np.frombuffer(blob, dtype="<u4").astype(np.int64).tolist()
