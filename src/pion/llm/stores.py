"""Where segment rows live: pion-server (shared, survives restarts) or this process's memory.

Both stores answer the same calls, made only from pion-llm's single model worker:

- ``fetch_chain(links)``: the rows of the longest stored prefix of a chain, root first. Called once
  per request before prefill. A segment that is missing, half written or fails to decode ends the
  chain there; it never raises for a miss.
- ``credit(links, n_tokens, prefill_ms)``: record one restore (or, with no links, one miss) in the
  value receipt. Called once per request.
- ``store(link, rows)``: keep a newly prefilled segment. Called after the response is done.
- ``drop(namespaces)``: forget segments the budget evicted.
- ``stored_bytes(shape, n_tokens)``: what holding a segment of ``n_tokens`` costs this store, in the
  form it really keeps (the budget's unit): the storage format's exact row size on pion-server, the
  model dtype's bytes in memory.

``PionSegmentStore`` wire usage per request, all pipelined (one round trip each line); rows move
through ``pion.client.prefix_transport``, the transport ``PionPromptCache`` uses, so quantized
segments travel as their stored bytes and are decoded here (3–4x faster than server-side f16)::

    V.MFETCH <ns>_pk 0 L RANGE 0 n DTYPE raw ; V.MFETCH <ns>_pv 0 L RANGE 0 n DTYPE raw   (every segment)
    KV.PREFIX.LOOKUP <leaf> TOKENS <restored tokens> [PREFILL_MS <ms>]   (or LOOKUP <first> on a miss)
    KV.PREFIX.REGISTER <ns> <kv_dim> <vquant> LAYERS L PREFILL_MS <ms> ; V.STOREBATCH <ns>_pk|pv <l> 0 <f16 rows> DTYPE f16 ...

The fetch is speculative (all segments at once, one round trip): a missing segment answers -ERR,
which costs nothing. A server that goes away turns the store *unavailable*: requests are served
uncached with a warning, and the connection is retried at most every ``RETRY_S`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from pion.client.connection import PionClient
from pion.client.prefix_transport import LayerFormats, PrefixTransport, stacked_rows
from pion.common.ids import Namespace
from pion.common.ports import DEFAULT_HOST, PION_SERVER_PORT
from pion.llm.segments import ChainLink, ModelShape, SegmentKV

logger = logging.getLogger("pion.llm")

RETRY_S = 5.0


class SegmentStore(Protocol):
    """What the engine needs from a place that holds segments."""

    def fetch_chain(self, links: Sequence[ChainLink]) -> list[SegmentKV]: ...

    def credit(self, links: Sequence[ChainLink], n_tokens: int, prefill_ms: float | None) -> None: ...

    def store(self, link: ChainLink, rows: SegmentKV) -> bool: ...

    def drop(self, namespaces: Sequence[Namespace]) -> int: ...

    def stored_bytes(self, shape: ModelShape, n_tokens: int) -> int: ...

    def status(self) -> dict[str, Any]: ...


class MemorySegmentStore:
    """Segments kept as tensors in this process (``--no-pion``): no transfer, no persistence."""

    def __init__(self, bytes_per_value: int = 4) -> None:
        self.bytes_per_value = bytes_per_value  # segments are kept in the model's dtype (fp32: 4)
        self._rows: dict[Namespace, SegmentKV] = {}
        self.hits = 0
        self.misses = 0

    def fetch_chain(self, links: Sequence[ChainLink]) -> list[SegmentKV]:
        out: list[SegmentKV] = []
        for link in links:
            rows = self._rows.get(link.namespace)
            if rows is None:
                break
            out.append(rows)
        return out

    def credit(self, links: Sequence[ChainLink], n_tokens: int, prefill_ms: float | None) -> None:
        if n_tokens > 0:
            self.hits += 1
        else:
            self.misses += 1

    def store(self, link: ChainLink, rows: SegmentKV) -> bool:
        self._rows[link.namespace] = rows
        return True

    def drop(self, namespaces: Sequence[Namespace]) -> int:
        return sum(self._rows.pop(ns, None) is not None for ns in namespaces)

    def stored_bytes(self, shape: ModelShape, n_tokens: int) -> int:
        return 2 * shape.n_layers * n_tokens * shape.kv_dim * self.bytes_per_value

    def status(self) -> dict[str, Any]:
        return {"backend": "memory", "status": "ok", "segments": len(self._rows),
                "hits": self.hits, "misses": self.misses}


class PionSegmentStore:
    """Segments in pion-server sessions ``<ns>_pk`` / ``<ns>_pv``, moved by ``PrefixTransport``."""

    def __init__(self, shape: ModelShape, vquant: str = "fp16", host: str = DEFAULT_HOST, port: int = PION_SERVER_PORT,
                 password: str | None = None) -> None:
        self.shape = shape
        self.vquant = vquant
        self.address = f"{host}:{port}"
        self._host, self._port, self._password = host, port, password
        self.formats = LayerFormats.uniform(vquant, shape.n_layers)
        self._client: PionClient | None = None
        self._prefix_transport: PrefixTransport | None = None
        self._last_error: str | None = None
        self._last_attempt = 0.0
        self._lock = threading.Lock()  # status() is read from the event loop
        self.deferred = 0  # segments the server deferred (--admission 2hit): served uncached, not stored
        self._connect()

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> bool:
        self._last_attempt = time.monotonic()
        try:
            client = PionClient(host=self._host, port=self._port, password=self._password)
            client.ping()
        except Exception as exc:  # any failure means "serve uncached"
            self._mark_down(exc)
            return False
        with self._lock:
            self._client = client
            if self._last_error is not None:
                logger.warning("pion-server at %s is back; prefix cache re-enabled", self.address)
            self._last_error = None
        return True

    def _mark_down(self, exc: BaseException) -> None:
        with self._lock:
            first = self._last_error is None or self._client is not None
            self._client = None
            self._last_error = f"{type(exc).__name__}: {exc}"
        if first:
            logger.warning("pion-server at %s unavailable (%s); serving without the prefix cache",
                           self.address, self._last_error)

    def _conn(self) -> PionClient | None:
        """The PionClient, reconnecting at most every RETRY_S while the server is down."""
        if self._client is None and time.monotonic() - self._last_attempt >= RETRY_S:
            self._connect()
        return self._client

    def _transport(self) -> PrefixTransport | None:
        """The shared prefix transport over the current connection (None while the server is down)."""
        conn = self._conn()
        if conn is None:
            return None
        if self._prefix_transport is None or self._prefix_transport.client is not conn:
            self._prefix_transport = PrefixTransport(conn, self.shape, self.formats)
        return self._prefix_transport

    def redis_client(self) -> Any | None:
        """The redis-py client for stage 2's ATTEND commands (None while the server is down)."""
        conn = self._conn()
        return None if conn is None else conn.redis

    # -- SegmentStore ----------------------------------------------------------------------------

    def fetch_chain(self, links: Sequence[ChainLink]) -> list[SegmentKV]:
        transport = self._transport()
        if transport is None or not links:
            return []
        try:
            restored = transport.fetch_chain([(link.namespace, link.n_tokens) for link in links])
        except Exception as exc:  # connection trouble: serve uncached
            self._mark_down(exc)
            return []
        return [SegmentKV(r.stacked("k"), r.stacked("v")) for r in restored]

    def credit(self, links: Sequence[ChainLink], n_tokens: int, prefill_ms: float | None) -> None:
        conn = self._conn()
        if conn is None or not links:
            return
        try:
            if n_tokens > 0:
                conn.kv_prefix_lookup(links[-1].namespace, tokens=n_tokens, prefill_ms=prefill_ms)
            else:
                conn.kv_prefix_lookup(links[0].namespace)  # counts the miss
        except Exception as exc:
            self._mark_down(exc)

    def store(self, link: ChainLink, rows: SegmentKV) -> bool:
        transport = self._transport()
        if transport is None:
            return False
        try:
            errors, _, deferred = transport.store(link.namespace, stacked_rows(rows.keys, rows.values),
                                                  prefill_ms=rows.prefill_ms)
        except Exception as exc:
            self._mark_down(exc)
            return False
        if deferred:  # --admission 2hit: admitted on the segment's next sighting; served uncached now
            with self._lock:
                self.deferred += 1
            return False
        if errors:
            logger.warning("storing segment %s failed: %s", link.namespace, errors[0])
            return False
        return True

    def drop(self, namespaces: Sequence[Namespace]) -> int:
        conn = self._conn()
        if conn is None or not namespaces:
            return 0
        try:
            return int(conn.kv_prefix_drop(*namespaces))
        except Exception as exc:
            self._mark_down(exc)
            return 0

    def stored_bytes(self, shape: ModelShape, n_tokens: int) -> int:
        return shape.segment_bytes(n_tokens, self.vquant)

    def status(self) -> dict[str, Any]:
        with self._lock:
            up = self._client is not None
            error = self._last_error
        out: dict[str, Any] = {"backend": "pion-server", "address": self.address,
                               "status": "ok" if up else "unavailable", "deferred": self.deferred}
        if not up:
            out["warning"] = f"pion-server unavailable, serving uncached: {error}"
        return out

