"""ColdTier: the cluster client, its threads, and the tier's counters.

redis-py's ``RedisCluster`` (hiredis parser) does the cluster protocol: slot map, MOVED/ASK,
failover re-discovery. Its calls block, so every one runs in a thread pool and the event loop
only awaits the future: a slow or dead cluster never stalls the warm tier. Reads (index,
promotions) use a small pool; writes use ONE thread, so the writes of one front reach the
cluster in the order the front applied them (a later layer snapshot never lands before an
earlier one).

Failures are logged and counted (``coldtier_errors``), never raised to the client: a cold
tier that is down reads as a MISS, and a write that failed is retried by the flusher.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
from redis.backoff import ConstantBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from pion.server.coldtier.layout import (
    CHANNEL, GEN_FIELD, ColdIndex, PrefixMeta, index_key, invalidation, rows_field, rows_key,
)
from pion.server.coldtier.url import ColdTierUrl

log = logging.getLogger("pion.server.coldtier")
T = TypeVar("T")

CONNECT_TIMEOUT_S = 0.5
IO_TIMEOUT_S = 2.0
ERROR_LOG_EVERY_S = 5.0  # a dead cluster logs once per interval, not once per LOOKUP
DOWN_FOR_S = 1.0  # after a connection failure, calls fail fast for this long (no timeout per call)


@dataclass(slots=True)
class ColdStats:
    """The PION.STATS fields a front with a cold tier adds (docs/scale-out.md)."""

    coldtier_hits: int = 0  # LOOKUPs answered +HIT from the cold tier (the warm tier missed)
    coldtier_misses: int = 0  # warm misses the cold tier could not serve either
    coldtier_promotions: int = 0  # prefixes copied cold -> warm
    coldtier_demotions: int = 0  # prefixes evicted from the warm tier while kept in the cold tier
    coldtier_bytes_read: int = 0  # encoded row bytes moved cold -> warm
    coldtier_bytes_written: int = 0  # encoded row bytes moved warm -> cold
    coldtier_errors: int = 0  # cluster calls that failed (logged)
    coldtier_invalidations: int = 0  # warm copies dropped because another front dropped or re-registered them

    def fields(self) -> dict[str, int | float]:
        return {name: getattr(self, name) for name in self.__slots__}

    def reset(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


@dataclass(frozen=True, slots=True)
class LayerRows:
    """One side/layer's encoded rows, copied out of the warm tier for writing: rows
    ``start..rows`` of the layer (``start`` 0: all of it)."""

    side: str
    layer: int
    rows: int
    data: bytes
    start: int = 0


# A partial layer write (rows start.. of a layer whose earlier rows the cluster already has):
# SETRANGE at the rows' byte offset, and the layer's row count, in one script on the prefix's
# slot (both keys share the {ns} tag). Refused (0) unless the string holds every byte before the
# offset and ends where the layer ends afterwards: a gap (an earlier write that failed, rows
# evicted by maxmemory) or a longer leftover must never be read as rows. The caller then
# writes the whole layer.
PARTIAL_WRITE = """
local n = redis.call('STRLEN', KEYS[1])
local offset = tonumber(ARGV[1])
local total = tonumber(ARGV[3])
if n < offset or math.max(n, offset + string.len(ARGV[2])) ~= total then return 0 end
redis.call('SETRANGE', KEYS[1], offset, ARGV[2])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
return 1
"""


def make_client(url: ColdTierUrl) -> Any:
    """A redis-py client for the URL (hiredis parses replies when installed, as everywhere)."""
    retry = Retry(ConstantBackoff(0.05), 2)
    common: dict[str, Any] = dict(socket_timeout=IO_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                  retry=retry)
    if url.cluster:
        nodes = [ClusterNode(h, p) for h, p in url.nodes]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=nodes, **common)
    host, port = url.nodes[0]
    return redis.Redis(host=host, port=port, **common)


class ColdTier:
    """One front's view of the shared cold tier."""

    def __init__(self, url: ColdTierUrl, mode: str,
                 client_factory: Callable[[ColdTierUrl], Any] = make_client) -> None:
        self.url = url
        self.mode = mode  # "through" | "behind"
        self.stats = ColdStats()
        self.front_id = secrets.token_hex(8)  # names this front's invalidations (it ignores its own)
        self._factory = client_factory
        self._client: Any = None
        self._readers = ThreadPoolExecutor(4, thread_name_prefix="pion-cold-read")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="pion-cold-write")
        self._last_error_log = 0.0
        self._down_until = 0.0

    # ---- plumbing ------------------------------------------------------------------------
    def _get_client(self) -> Any:
        """Connect lazily (in a pool thread): a front starts even while the cluster is down."""
        if self._client is None:
            self._client = self._factory(self.url)
        return self._client

    def _failed(self, what: str, exc: BaseException) -> None:
        self.stats.coldtier_errors += 1
        now = time.monotonic()
        if now - self._last_error_log >= ERROR_LOG_EVERY_S:
            self._last_error_log = now
            log.warning("cold tier %s: %s failed: %s: %s (the warm tier keeps serving)",
                        self.url.text(), what, type(exc).__name__, exc)
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, redis.RedisClusterException)):
            self._client = None  # rebuild the slot map on the next call
            self._down_until = now + DOWN_FOR_S

    async def _run(self, pool: ThreadPoolExecutor, what: str, fn: Callable[[Any], T]) -> T | None:
        if time.monotonic() < self._down_until:
            return None  # a cluster that just failed to connect: a MISS / a retried write, at once
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, lambda: fn(self._get_client()))
        except Exception as exc:  # any client failure reads as "not there" / "not written"
            self._failed(what, exc)
            return None

    # ---- reads ---------------------------------------------------------------------------
    async def read_index(self, ns: str) -> ColdIndex | None:
        """One round trip: the prefix's index hash (None: not there, or the tier is down)."""
        return (await self.read_index_checked(ns))[1]

    async def read_index_checked(self, ns: str) -> tuple[bool, ColdIndex | None]:
        """As ``read_index``, plus whether the tier answered: (False, None) when it is down."""
        raw = await self._run(self._readers, f"index of '{ns}'",
                              lambda c: c.hgetall(index_key(ns)))
        if raw is None:
            return False, None
        if not raw:
            return True, None
        try:
            return True, ColdIndex.decode(raw)
        except (ValueError, KeyError, TypeError) as exc:
            self._failed(f"decoding the index of '{ns}'", exc)
            return True, None

    async def read_rows(self, ns: str, index: ColdIndex) -> list[LayerRows] | None:
        """Every layer the index lists, in one pipeline (one slot, so one shard, one round trip)."""
        wanted = sorted(index.rows)

        def fetch(c: Any) -> list[Any]:
            pipe = c.pipeline(transaction=False)
            for side, layer in wanted:
                pipe.get(rows_key(ns, side, layer))
            return list(pipe.execute())

        blobs = await self._run(self._readers, f"rows of '{ns}'", fetch)
        if blobs is None:
            return None
        out: list[LayerRows] = []
        for (side, layer), blob in zip(wanted, blobs):
            if blob is None:  # dropped between the two round trips
                return None
            out.append(LayerRows(side, layer, index.rows[(side, layer)], bytes(blob)))
        self.stats.coldtier_bytes_read += sum(len(r.data) for r in out)
        return out

    # ---- writes --------------------------------------------------------------------------
    def _put(self, c: Any, ns: str, meta: PrefixMeta | None, layers: list[LayerRows],
             gen: str | None) -> tuple[int, set[tuple[str, int]]]:
        """Whole layers, then their counts (and the meta and generation) in the index: one
        pipeline, one slot; then each partial layer (``PARTIAL_WRITE``, one call each). A write
        that carries the meta is then announced (one PUBLISH), after the cluster acknowledged
        it: a front that hears it and re-promotes reads these rows. Returns the bytes sent and
        the (side, layer) parts whose partial write was refused (to be written whole)."""
        whole = [p for p in layers if p.start == 0]
        pipe = c.pipeline(transaction=False)
        for part in whole:
            pipe.set(rows_key(ns, part.side, part.layer), part.data)
        mapping: dict[str, str | int] = {rows_field(p.side, p.layer): p.rows for p in whole}
        if meta is not None:
            mapping["meta"] = meta.to_json()
            if gen is not None:
                mapping[GEN_FIELD] = gen
        if mapping:
            pipe.hset(index_key(ns), mapping=mapping)
            pipe.execute()
        sent = sum(len(p.data) for p in whole)
        refused: set[tuple[str, int]] = set()
        for part in layers:
            if part.start == 0:
                continue
            row_bytes = len(part.data) // max(1, part.rows - part.start)
            done = c.eval(PARTIAL_WRITE, 2, rows_key(ns, part.side, part.layer), index_key(ns),
                          part.start * row_bytes, part.data, part.rows * row_bytes,
                          rows_field(part.side, part.layer), part.rows)
            if int(done):
                sent += len(part.data)
            else:
                refused.add((part.side, part.layer))
        if meta is not None and gen is not None:
            c.publish(CHANNEL, invalidation(self.front_id, gen, ns))
        return sent, refused

    async def write(self, ns: str, meta: PrefixMeta | None, layers: list[LayerRows],
                    gen: str | None = None) -> set[tuple[str, int]] | None:
        """Write the meta (if given, with its generation) and these layers once the cluster
        acknowledged: the (side, layer) parts to write again whole (a refused partial write;
        usually none), or None when the write failed."""
        done = await self._run(self._writer, f"writing '{ns}'", lambda c: self._put(c, ns, meta, layers, gen))
        if done is None:
            return None
        self.stats.coldtier_bytes_written += done[0]
        return done[1]

    def write_blocking(self, ns: str, meta: PrefixMeta | None, layers: list[LayerRows],
                       gen: str | None = None) -> bool:
        """The same write from the calling thread (shutdown, when no loop runs any more)."""
        try:
            sent, _ = self._put(self._get_client(), ns, meta, layers, gen)  # whole layers: none refused
        except Exception as exc:  # logged and counted like every other cold-tier failure
            self._failed(f"writing '{ns}' at shutdown", exc)
            return False
        self.stats.coldtier_bytes_written += sent
        return True

    async def drop(self, namespaces: list[str]) -> set[str] | None:
        """Delete each prefix's index and rows; the namespaces that were there (None: tier down)."""
        def delete(c: Any) -> set[str]:
            gone: set[str] = set()
            for ns in namespaces:
                fields = c.hkeys(index_key(ns))
                if not fields:
                    continue
                keys = [index_key(ns)]
                for name in fields:
                    side, _, layer = name.decode().partition(":")
                    if layer.isdigit():
                        keys.append(rows_key(ns, side, int(layer)))
                pipe = c.pipeline(transaction=False)
                for key in keys:  # one DEL per key: cluster clients refuse multi-key DEL across slots
                    pipe.delete(key)
                pipe.execute()
                gone.add(ns)
            for ns in namespaces:  # every front drops its warm copy, held or not here
                c.publish(CHANNEL, invalidation(self.front_id, None, ns))
            return gone

        return await self._run(self._writer, "dropping " + " ".join(namespaces), delete)

    def close(self) -> None:
        self._readers.shutdown(wait=False, cancel_futures=True)
        self._writer.shutdown(wait=True, cancel_futures=False)
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # closing a dead cluster's sockets may fail; nothing to save
                pass
