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

``PionSegmentStore`` wire usage per request, all pipelined (one round trip each line)::

    V.MFETCH <ns>_pk 0 L RANGE 0 n DTYPE f16 ; V.MFETCH <ns>_pv 0 L RANGE 0 n DTYPE f16   (every segment)
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

import numpy as np
import torch

from pion.common.ids import Namespace, k_session, v_session
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
    """Segments in pion-server sessions ``<ns>_pk`` / ``<ns>_pv``, rows in fp16 on the wire."""

    def __init__(self, shape: ModelShape, vquant: str = "fp16", host: str = DEFAULT_HOST, port: int = PION_SERVER_PORT,
                 password: str | None = None) -> None:
        self.shape = shape
        self.vquant = vquant
        self.address = f"{host}:{port}"
        self._host, self._port, self._password = host, port, password
        self._client: Any | None = None
        self._last_error: str | None = None
        self._last_attempt = 0.0
        self._lock = threading.Lock()  # status() is read from the event loop
        self._connect()

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> bool:
        from pion.client.connection import PionClient

        self._last_attempt = time.monotonic()
        try:
            client = PionClient(host=self._host, port=self._port, password=self._password)
            client.ping()
        except Exception as exc:  # noqa: BLE001 - any failure means "serve uncached"
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

    def _conn(self) -> Any | None:
        """The PionClient, reconnecting at most every RETRY_S while the server is down."""
        if self._client is None and time.monotonic() - self._last_attempt >= RETRY_S:
            self._connect()
        return self._client

    # -- SegmentStore ----------------------------------------------------------------------------

    def fetch_chain(self, links: Sequence[ChainLink]) -> list[SegmentKV]:
        conn = self._conn()
        if conn is None or not links:
            return []
        pipe = conn.pipeline()
        for link in links:
            for sid in (k_session(link.namespace), v_session(link.namespace)):
                pipe.v_mfetch(sid, 0, self.shape.n_layers, 0, link.n_tokens, dtype="f16")
        try:
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - connection trouble: serve uncached
            self._mark_down(exc)
            return []
        out: list[SegmentKV] = []
        for i, link in enumerate(links):
            k_reply, v_reply = replies[2 * i], replies[2 * i + 1]
            rows = self._decode(link, k_reply, v_reply)
            if rows is None:
                break
            out.append(rows)
        return out

    def _decode(self, link: ChainLink, k_reply: Any, v_reply: Any) -> SegmentKV | None:
        if isinstance(k_reply, Exception) or isinstance(v_reply, Exception):
            return None
        try:
            return SegmentKV(self._side(k_reply, link.n_tokens), self._side(v_reply, link.n_tokens))
        except ValueError as exc:
            logger.warning("segment %s has unexpected rows (%s); treated as missing", link.namespace, exc)
            return None

    def _side(self, blobs: Sequence[bytes], n_tokens: int) -> torch.Tensor:
        """[L, H, n, D] fp16 view of one side's reply; converted to the model dtype when the cache is built."""
        shape = self.shape
        if len(blobs) != shape.n_layers:
            raise ValueError(f"{len(blobs)} layers, expected {shape.n_layers}")
        buf = bytearray().join(blobs)  # one memcpy into a writable buffer torch can wrap without copying
        expected = shape.n_layers * n_tokens * shape.kv_dim * 2
        if len(buf) != expected:
            raise ValueError(f"{len(buf)} bytes, expected {expected} "
                             f"({shape.n_layers}x{n_tokens}x{shape.kv_dim} fp16)")
        rows = torch.frombuffer(buf, dtype=torch.float16) if buf else torch.empty(0, dtype=torch.float16)
        return rows.view(shape.n_layers, n_tokens, shape.n_kv_heads, shape.head_dim).permute(0, 2, 1, 3)

    def credit(self, links: Sequence[ChainLink], n_tokens: int, prefill_ms: float | None) -> None:
        conn = self._conn()
        if conn is None or not links:
            return
        try:
            if n_tokens > 0:
                conn.kv_prefix_lookup(links[-1].namespace, tokens=n_tokens, prefill_ms=prefill_ms)
            else:
                conn.kv_prefix_lookup(links[0].namespace)  # counts the miss
        except Exception as exc:  # noqa: BLE001
            self._mark_down(exc)

    def store(self, link: ChainLink, rows: SegmentKV) -> bool:
        conn = self._conn()
        if conn is None:
            return False
        shape = self.shape
        pipe = conn.pipeline()
        pipe.kv_prefix_register(link.namespace, shape.kv_dim, self.vquant, layers=shape.n_layers,
                                prefill_ms=rows.prefill_ms)
        for sid, side in ((k_session(link.namespace), rows.keys), (v_session(link.namespace), rows.values)):
            blob = _wire_rows(side)
            for layer in range(shape.n_layers):
                pipe.v_storebatch(sid, layer, 0, blob[layer].tobytes(), dtype="f16")
        try:
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001
            self._mark_down(exc)
            return False
        errors = [r for r in replies if isinstance(r, Exception)]
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
        except Exception as exc:  # noqa: BLE001
            self._mark_down(exc)
            return 0

    def stored_bytes(self, shape: ModelShape, n_tokens: int) -> int:
        return shape.segment_bytes(n_tokens, self.vquant)

    def status(self) -> dict[str, Any]:
        with self._lock:
            up = self._client is not None
            error = self._last_error
        out: dict[str, Any] = {"backend": "pion-server", "address": self.address,
                               "status": "ok" if up else "unavailable"}
        if not up:
            out["warning"] = f"pion-server unavailable, serving uncached: {error}"
        return out


def _wire_rows(side: torch.Tensor) -> np.ndarray:
    """[L, H, n, D] -> contiguous [L, n, H*D] little-endian fp16 (one token's row is kv_dim values)."""
    return side.permute(0, 2, 1, 3).to(torch.float16).contiguous().numpy()
