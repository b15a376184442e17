"""The stage-2 half of ``PionPromptCache(stage2=True)``: push, warm-check, and lane choice.

Called by PionPromptCache (a few one-line hooks there); owns no connection of its own except the
optional binary-lane socket. Roles:
  * ``get_or_prefill(ids, ns)`` — once per request, replaces the stage-1 restore:
      - V-store HIT: every layer's ATTEND side is probed (one pipelined round trip); anything
        not warm is rebuilt with KV.PREFIX.WARM (a stale V-store HIT never skips the push).
        Nothing is fetched: the returned cache attends remotely.
      - MISS: local prefill, the stage-1 store (V-store), then ATTEND.PREFIX.STORE for every
        layer in one pipeline; the prefix K/V stay in this process for the in-process lane.
      - server down or failing: local prefill and the in-process lane; nothing raises.
  * ``make_cache(ns, prefix_len)`` — a ``DynamicCache`` of ``PionRemoteLayer`` whose lane is
    in-process when this process holds the prefix (unless ``PION_PROMPT_CACHE_NO_INPROC=1``),
    else the binary lane when it answers, else RESP.
  * ``pion-server -w N``: a stage-2 command answered ``session lives on worker N <host:port>``
    moves the RESP client to that worker and runs once more (``PionClient.follow_redirect``, as
    the stage-1 store and restore do); the binary lane follows the lane redirect itself and
    remembers each prefix's owner (``BinaryLaneClient``). ``follow_redirects=False`` turns both
    off (the redirect is then the error a failed stage-2 call raises or logs).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import torch

from pion.client.stage2.binary_client import BinaryLaneClient, BinaryLaneError
from pion.client.stage2.lanes import InprocLane, Stage2Counters, WireLane
from pion.client.stage2.layer import PrefixLane, make_remote_cache
from pion.client.stage2.patch import select_pion_attention
from pion.client.stage2.wire import (
    attend_sid, lookup_layers, query_fused, query_sparse_auto_fused, store_layer, warm,
)

if TYPE_CHECKING:
    from pion.client.prompt_cache import PionPromptCache

logger = logging.getLogger(__name__)
NO_INPROC_ENV = "PION_PROMPT_CACHE_NO_INPROC"
MAX_INPROC_PREFIXES = 8
LaneChoice = str  # "auto" | "inproc" | "binary" | "resp"
T = TypeVar("T")


class Stage2Support:
    """Stage-2 state of one PionPromptCache.

    Args:
        pc: the owning cache (its client, model, shape, counters and stage-1 store are used).
        lane: ``"auto"`` (in-process → binary → RESP), or force ``"binary"`` / ``"resp"``.
        binary_port: the binary lane's port; default the lane of the worker the RESP connection is
            on (``PION.WORKER``'s ``binary_address`` under ``-w N``), else the RESP port + 1.
        follow_redirects: follow a ``-w N`` worker's redirect to the prefix's owner (RESP and lane).
    """

    def __init__(self, pc: PionPromptCache, lane: LaneChoice = "auto", binary_port: int | None = None,
                 follow_redirects: bool = True) -> None:
        self.pc = pc
        self.lane = lane
        self.follow_redirects = follow_redirects
        self.counters = Stage2Counters()
        self._inproc: OrderedDict[str, list[tuple[Any, Any]]] = OrderedDict()  # per layer (K, V) of a runtime
        self._binary: BinaryLaneClient | None = None
        self._binary_port = binary_port
        self._binary_tried = False
        # (B, K_top): wire lanes use QUERY_SPARSE_AUTO_FUSED (server-picked prefix blocks) over RESP
        self.sparse_auto: tuple[int, int] | None = None
        self._not_pushed: set[str] = set()  # prefixes only this process holds (server down / push failed)

    @property
    def inproc_enabled(self) -> bool:
        return self.lane in ("auto", "inproc") and os.environ.get(NO_INPROC_ENV) != "1"

    # ---- request path ------------------------------------------------------------------------

    def get_or_prefill(self, ids: list[int], ns: str) -> Any:
        pc = self.pc
        if pc.client is not None:
            try:
                if pc.client.kv_prefix_lookup(ns):
                    self.ensure_warm(ns)
                    self._not_pushed.discard(ns)
                    pc._stats.hits += 1
                    return self.make_cache(ns, len(ids))
            except (redis.RedisError, ValueError) as exc:
                logger.warning("stage-2 hit path for %s failed (%s); prefilling locally", ns, exc)
                pc._stats.fallbacks += 1
        pc._stats.misses += 1
        cache, prefill_ms = pc._timed_prefill(ids)
        pushed = pc.client is not None and pc._store(ns, ids, cache, prefill_ms) and self.push(ns, cache, len(ids))
        if pushed and not self.inproc_enabled:
            return self.make_cache(ns, len(ids))
        self._keep_inproc(ns, cache, len(ids))  # the in-process lane; the only one when the push failed
        if not pushed:
            self._not_pushed.add(ns)
        return self.make_cache(ns, len(ids), force_inproc=not pushed)

    def on_owner(self, call: Callable[[Any], T]) -> T:
        """``call(redis_connection)``; a ``-w N`` redirect moves the client to the owner worker and
        runs it once more there (unless ``follow_redirects`` is off)."""
        client = self.pc.client
        assert client is not None
        try:
            return call(client.redis)
        except redis.ResponseError as exc:
            if not (self.follow_redirects and client.follow_redirect(exc)):
                raise
        return call(client.redis)

    def attend_warm(self, ns: str) -> bool:
        """True when every layer's ATTEND side is warm on the server."""
        n_layers = self.pc.shape.n_layers
        states = self.on_owner(lambda conn: lookup_layers(conn, attend_sid(ns), n_layers))
        return all(state == "HIT" for state in states)

    def ensure_warm(self, ns: str) -> None:
        """Rebuild the ATTEND side from the V-store unless every layer is already warm."""
        if not self.attend_warm(ns):
            self.rehydrate(ns)

    def rehydrate(self, ns: str) -> None:
        shape = self.pc.shape
        layers = self.on_owner(lambda conn: warm(conn, ns, shape.n_kv_heads, shape.head_dim))
        if layers != shape.n_layers:
            raise ValueError(f"KV.PREFIX.WARM rebuilt {layers} of {shape.n_layers} layers of {ns}")

    def push(self, ns: str, cache: Any, n_tokens: int) -> bool:
        """ATTEND.PREFIX.STORE every layer (fp32 ``[H, N, D]``) in one pipeline; False on failure."""
        rows = self._push_rows(cache, n_tokens)

        def store_all(conn: Any) -> None:
            pipe = conn.pipeline(transaction=False)
            for layer_idx, (keys, values) in enumerate(rows):
                store_layer(pipe, attend_sid(ns), layer_idx, keys, values)
            failed = [r for r in pipe.execute(raise_on_error=False) if isinstance(r, Exception)]
            if failed:
                raise failed[0]
        try:
            self.on_owner(store_all)
            errors: list[BaseException] = []
        except redis.RedisError as exc:
            errors = [exc]
        if errors:
            logger.warning("ATTEND.PREFIX.STORE for %s failed (%s); stage 2 will warm it on demand", ns, errors[0])
            return False
        return True

    # ---- caches and lanes --------------------------------------------------------------------

    def make_cache(self, ns: str, prefix_len: int, force_inproc: bool = False) -> Any:
        """A stage-2 cache for the prefix ``ns`` of ``prefix_len`` tokens (see the module docstring)."""
        select_pion_attention(self.pc.model)
        return make_remote_cache(self.pc.model.config, prefix_len, self._lane_for(ns, prefix_len, force_inproc))

    def _lane_for(self, ns: str, prefix_len: int, force_inproc: bool) -> PrefixLane:
        held = self._inproc.get(ns)
        must_stay_local = force_inproc or self.pc.client is None or ns in self._not_pushed
        if held is not None and (self.inproc_enabled or must_stay_local):
            if self._held_tokens(held) != prefix_len:
                raise ValueError(f"prefix {ns} holds {self._held_tokens(held)} tokens, not {prefix_len}")
            self._inproc.move_to_end(ns)
            return self._inproc_lane(held)
        if self.pc.client is None:
            raise ValueError(f"prefix {ns} is not held in this process and pion-server is unreachable")
        sid = attend_sid(ns)
        binary = self._binary_client() if self.lane in ("auto", "binary") and self.sparse_auto is None else None
        if self.sparse_auto is not None:
            block, k_top = self.sparse_auto

            def query(layer: int, q: Any, k: Any, v: Any) -> bytes:
                return self.on_owner(lambda conn: query_sparse_auto_fused(conn, sid, layer, q, k, v, block, k_top))
        elif binary is not None:
            def query(layer: int, q: Any, k: Any, v: Any) -> bytes:
                return binary.query_fused(sid, layer, q, k, v)
        else:
            def query(layer: int, q: Any, k: Any, v: Any) -> bytes:
                return self.on_owner(lambda conn: query_fused(conn, sid, layer, q, k, v))
        return self._wire_lane(sid, query, lambda: self.rehydrate(ns))

    # ---- what a runtime provides (pion.client.runtimes.mlx_stage2 overrides these for mlx-lm) ----

    def _push_rows(self, cache: Any, n_tokens: int) -> list[tuple[Any, Any]]:
        """Every layer's first ``n_tokens`` K and V as fp32 numpy ``[H, N, D]`` (ATTEND.PREFIX.STORE's input)."""
        def fp32(t: torch.Tensor) -> Any:
            return t[0, :, :n_tokens].to(device="cpu", dtype=torch.float32).contiguous().numpy()
        return [(fp32(layer.keys), fp32(layer.values)) for layer in cache.layers]

    def _held_arrays(self, cache: Any, n_tokens: int) -> list[tuple[Any, Any]]:
        """What the in-process lane keeps per layer (views of the prefilled cache)."""
        return [(layer.keys[0, :, :n_tokens], layer.values[0, :, :n_tokens]) for layer in cache.layers]

    def _held_tokens(self, held: list[tuple[Any, Any]]) -> int:
        """Tokens of a prefix kept in process (``[H, P, D]`` tensors here)."""
        return int(held[0][0].shape[1])

    def _inproc_lane(self, held: list[tuple[Any, Any]]) -> Any:
        return InprocLane(held, self.counters)

    def _wire_lane(self, sid: str, query: Any, rehydrate: Any) -> Any:
        return WireLane(sid, query, rehydrate, self.counters)

    def _binary_client(self) -> BinaryLaneClient | None:
        if self._binary is None and not self._binary_tried:
            self._binary_tried = True
            kwargs = self.pc.client.redis.connection_pool.connection_kwargs if self.pc.client else {}
            host = kwargs.get("host", "127.0.0.1")
            port = self._binary_port or self._workers_lane_port() or int(kwargs.get("port", 1974)) + 1
            try:
                self._binary = BinaryLaneClient(host, port, kwargs.get("password"),
                                                follow_redirects=self.follow_redirects)
            except (OSError, BinaryLaneError) as exc:
                if self.lane == "binary":
                    raise
                logger.info("binary lane at %s:%s not available (%s); using RESP", host, port, exc)
        return self._binary

    def _workers_lane_port(self) -> int | None:
        """Under ``-w N`` the lane port of the worker the RESP connection is on (``PION.WORKER``
        ``binary_address``; the workers' own lane ports are not RESP port + 1); None otherwise."""
        if self.pc.client is None:
            return None
        try:
            reply = self.pc.client.redis.execute_command("PION.WORKER")
        except redis.RedisError:
            return None  # an older server, or one that refuses it: the RESP port + 1
        fields = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
        address = fields.get(b"binary_address", fields.get("binary_address"))
        if address is None:
            return None
        text = address.decode() if isinstance(address, bytes) else str(address)
        return int(text.rsplit(":", 1)[1])

    def _keep_inproc(self, ns: str, cache: Any, n_tokens: int) -> None:
        self._inproc[ns] = self._held_arrays(cache, n_tokens)
        self._inproc.move_to_end(ns)
        while len(self._inproc) > MAX_INPROC_PREFIXES:
            self._inproc.popitem(last=False)

    def close(self) -> None:
        if self._binary is not None:
            self._binary.close()
            self._binary = None
