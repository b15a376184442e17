"""LMCache's ``RemoteConnector`` over pion-server, loaded by LMCache's remote storage plugin framework.

LMCache 0.5 (``lmcache/v1/storage_backend/connector/__init__.py``, ``ConnectorManager``) imports
``remote_storage_plugin.<name>.module_path`` and instantiates ``class_name``; an adapter (a
``ConnectorAdapter`` subclass) is handed the engine's metadata, which ``RemoteConnector`` needs, so
that is what we register. LMCache's ``RemoteBackend`` then calls the connector from its own asyncio
loop thread; every Pion call here is blocking redis-py, so each runs in a worker thread
(``asyncio.to_thread``) and the loop stays free for other keys.

Roles, by when LMCache calls them:
  * ``batched_contains`` / ``batched_async_contains`` / ``exists`` — at lookup, once per request:
    pipelined ``KV.PREFIX.LOOKUP`` of every chunk key, counting the leading hits.
  * ``batched_put`` / ``put`` — after a store, asynchronously: one round trip per batch
    (``KvChunkStore.put_many``). The memory objects stay owned by LMCache (it drops its
    reference when the future completes); we only read them.
  * ``batched_get`` / ``get`` / ``batched_get_non_blocking`` — at retrieve: one round trip of
    ``V.MFETCH``; each found chunk is decoded into a memory object allocated from LMCache's local
    CPU backend, which the caller then owns. A missing chunk is None; a connection failure raises,
    which LMCache's RemoteBackend logs and treats as a miss.

Against ``pion-server -w N`` the chunk store follows ``session lives on worker N`` redirects
(``pion.integrations.kv_chunks``). Only ``MemoryFormat.KV_2LTD`` (separate K and V, one layer
group) is supported; MLA and
heterogeneous layer groups are refused when the connector is created, with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlparse

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.storage_backend.connector import ConnectorAdapter, ConnectorContext, extract_plugin_type
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from pion.client.connection import DEFAULT_PORT, PionClient
from pion.common.ids import Namespace
from pion.integrations.kv_chunks import ChunkGeometry, FetchedChunk, KvChunkStore, ModelKey

logger = logging.getLogger(__name__)

PLUGIN_TYPE = "pion"
DEFAULT_URL = f"pion://127.0.0.1:{DEFAULT_PORT}"


def _model_key(key: CacheEngineKey) -> ModelKey:
    return ModelKey(key.model_name, int(key.world_size), int(key.worker_id), str(key.dtype))


def _tags(key: CacheEngineKey) -> tuple[object, ...]:
    return tuple(key.tags) if getattr(key, "tags", None) else ()


def parse_pion_url(url: str) -> tuple[str, int, str | None]:
    """``pion://[:password@]host[:port]`` -> (host, port, password); ValueError names a bad URL."""
    parsed = urlparse(url)
    if parsed.scheme != "pion" or not parsed.hostname:
        raise ValueError(f"remote_storage_plugin url must look like pion://host:port, got {url!r}")
    try:
        port = parsed.port or DEFAULT_PORT
    except ValueError as exc:
        raise ValueError(f"remote_storage_plugin url has a bad port: {url!r}") from exc
    return parsed.hostname, port, parsed.password


class PionRemoteConnector(RemoteConnector):
    """LMCache chunks as Pion KV prefixes (see ``pion.integrations.kv_chunks`` for the namespaces and wire)."""

    def __init__(self, client: PionClient, vquant: str, loop: asyncio.AbstractEventLoop,
                 local_cpu_backend: Any, config: Any, metadata: Any) -> None:
        super().__init__(config, metadata)
        if self.meta_fmt != MemoryFormat.KV_2LTD or len(self.meta_shapes) != 1:
            raise ValueError(f"pion remote storage needs one KV_2LTD layer group, got {self.meta_fmt} "
                             f"with {len(self.meta_shapes)} groups")
        _, n_layers, chunk_size, kv_dim = (int(d) for d in self.meta_shapes[0])
        self.geometry = ChunkGeometry(n_layers, kv_dim, chunk_size, self.meta_dtypes[0])
        self.store = KvChunkStore(client, self.geometry, vquant)
        self.client = client
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        logger.info("pion remote storage: %d layers x kv_dim %d, chunk %d tokens, %s stored as %s",
                    n_layers, kv_dim, chunk_size, self.geometry.dtype, self.store.format)

    def _ns(self, key: CacheEngineKey) -> Namespace:
        return self.store.chunk_namespace(_model_key(key), int(key.chunk_hash), _tags(key))

    # ---- lookup --------------------------------------------------------------------------------

    def exists_sync(self, key: CacheEngineKey) -> bool:
        return self.store.count_leading([self._ns(key)]) == 1

    async def exists(self, key: CacheEngineKey) -> bool:
        return await asyncio.to_thread(self.exists_sync, key)

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: list[CacheEngineKey]) -> int:
        return self.store.count_leading([self._ns(k) for k in keys])

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: list[CacheEngineKey], pin: bool = False) -> int:
        return await asyncio.to_thread(self.batched_contains, keys)

    # ---- store ---------------------------------------------------------------------------------

    def _put_sync(self, keys: list[CacheEngineKey], memory_objs: list[MemoryObj]) -> None:
        by_model: dict[ModelKey, list[tuple[Namespace, torch.Tensor]]] = {}
        for key, obj in zip(keys, memory_objs, strict=True):
            tensor = obj.tensor
            if tensor is None:
                raise ValueError(f"LMCache memory object for {key.to_string()} has no tensor view")
            by_model.setdefault(_model_key(key), []).append((self._ns(key), tensor))
        for model, chunks in by_model.items():
            self.store.put_many(model, chunks)

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        await asyncio.to_thread(self._put_sync, [key], [memory_obj])

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: list[CacheEngineKey], memory_objs: list[MemoryObj]) -> None:
        await asyncio.to_thread(self._put_sync, list(keys), list(memory_objs))

    # ---- restore -------------------------------------------------------------------------------

    def _get_sync(self, keys: list[CacheEngineKey]) -> list[MemoryObj | None]:
        fetched = self.store.fetch_many([self._ns(k) for k in keys])
        return [None if chunk is None else self._to_memory_obj(chunk) for chunk in fetched]

    def _to_memory_obj(self, chunk: FetchedChunk) -> MemoryObj | None:
        shape = torch.Size(self.geometry.shape(chunk.n_tokens))
        obj = self.local_cpu_backend.allocate([shape], [self.geometry.dtype], self.meta_fmt)
        if obj is None:
            logger.warning("LMCache's CPU buffer is full; chunk %s treated as a miss", chunk.ns)
            return None
        tensor = obj.tensor
        if tensor is None:
            obj.ref_count_down()
            raise ValueError("LMCache allocated a memory object without a tensor view")
        try:
            self.store.copy_into(chunk, tensor)
        except ValueError as exc:
            obj.ref_count_down()
            logger.warning("chunk %s has unexpected rows (%s); treated as a miss", chunk.ns, exc)
            return None
        return obj

    async def get(self, key: CacheEngineKey) -> MemoryObj | None:
        return (await asyncio.to_thread(self._get_sync, [key]))[0]

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: list[CacheEngineKey]) -> list[MemoryObj | None]:
        return await asyncio.to_thread(self._get_sync, list(keys))

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str, keys: list[CacheEngineKey]) -> list[MemoryObj]:
        """The leading chunks that were found (LMCache's contract: stop at the first miss)."""
        objs = await self.batched_get(keys)
        out: list[MemoryObj] = []
        for i, obj in enumerate(objs):
            if obj is None:
                for later in objs[i + 1:]:
                    if later is not None:
                        later.ref_count_down()
                break
            out.append(obj)
        return out

    # ---- housekeeping --------------------------------------------------------------------------

    def remove_sync(self, key: CacheEngineKey) -> bool:
        return self.store.drop([self._ns(key)]) == 1

    async def list(self) -> list[str]:
        return []  # chunk hashes are one-way; ``KvChunkStore.list_chunks`` lists by model

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        try:
            await asyncio.to_thread(self.client.ping)
        except Exception as exc:  # LMCache's contract: an error code, never a raise
            logger.warning("pion-server ping failed: %s", exc)
            return 1
        return 0

    async def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"<PionRemoteConnector {self.store.format} {self.geometry}>"


class PionConnectorAdapter(ConnectorAdapter):
    """Creates ``PionRemoteConnector`` for ``plugin://pion`` (and ``pion://`` remote URLs).

    Options (``extra_config``, ``remote_storage_plugin.<name>.<option>``): ``url``
    (``pion://[:password@]host:port``, default ``pion://127.0.0.1:1974``; a ``pion://`` ``remote_url``
    also works), ``vquant`` (storage format, default ``auto``), ``socket_timeout_s`` (default 30).
    """

    def __init__(self) -> None:
        super().__init__("pion://")

    def can_parse(self, url: str) -> bool:
        if url.startswith("plugin://"):
            return extract_plugin_type(url[len("plugin://"):]) == PLUGIN_TYPE
        return url.startswith(self.schema)

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        config = context.config
        extra = dict(config.extra_config or {}) if config is not None else {}
        name = context.plugin_name or PLUGIN_TYPE

        def option(key: str, default: str) -> str:
            return str(extra.get(f"remote_storage_plugin.{name}.{key}", default))

        url = context.url if context.url.startswith(self.schema) else option("url", DEFAULT_URL)
        host, port, password = parse_pion_url(url)
        try:
            timeout_s = float(option("socket_timeout_s", "30"))
        except ValueError as exc:
            raise ValueError(f"remote_storage_plugin.{name}.socket_timeout_s must be a number") from exc
        client = PionClient(host, port, password, socket_timeout_s=timeout_s)
        logger.info("pion remote storage plugin %s -> %s:%d", name, host, port)
        return PionRemoteConnector(client, option("vquant", "auto"), context.loop, context.local_cpu_backend,
                                   config, context.metadata)
