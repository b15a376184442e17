"""pion-llm ``--stage2``: restored segments are attended inside pion-server instead of fetched.

A conversation is a chain of segments (``pion.llm.segments``), each stored as a V-store prefix
``<ns>_pk``/``<ns>_pv``. With ``--stage2`` a request does not V.MFETCH the chain: it makes sure
each segment's ATTEND side (``<ns>_attn``) is warm — one pipelined ATTEND.PREFIX.LOOKUP of every
layer, and KV.PREFIX.WARM for a segment that is not (the server rebuilds it from the V-store, so
nothing is pushed) — and decodes with a ``PionRemoteLayer`` cache whose lane is ``ChainLane``:
per layer and forward, one pipelined round trip of ``ATTEND.PREFIX.QUERY`` per segment (each
answering output + LSE), then local causal attention over this request's own tokens and an
online-softmax merge of all the parts.

QUERY answers an LSE only for M > 1 rows, so a one-row (decode) query is sent twice and the
first row kept: same result, and it needs no protocol change.

Under ``pion-server -w N`` a chain's segments may live on different workers (each segment is
stored through whatever worker the connection reached). A segment whose warm check or WARM is
answered ``session lives on worker N <host:port>`` is checked once more on that worker, through
a connection opened for it (same settings, one per owner address, kept by ``Stage2Restore``);
``ChainLane`` then sends one pipeline per owner per layer and merges the parts in chain order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
import torch

from pion.client.redirect import parse_redirect
from pion.client.stage2.lanes import Stage2Counters
from pion.client.stage2.wire import attend_sid, is_coldmiss, lookup_layers, warm
from pion.llm.segments import ChainLink, ModelShape
from pion.server.attention.dense import attend, causal_mask
from pion.server.attention.merge import merge

logger = logging.getLogger("pion.llm")


@dataclass
class RemoteChain:
    """The restored part of a chain when it is attended remotely."""

    n_links: int
    n_tokens: int
    lane: Any


class ChainLane:
    """Prefix attention over several remote segments (in chain order) plus the local tokens.

    ``conns``: the connection each segment is attended through (its owner worker's under
    ``-w N``); default ``conn`` for every segment.
    """

    def __init__(self, conn: Any, sids: list[str], shape: ModelShape, namespaces: list[str],
                 counters: Stage2Counters, conns: list[Any] | None = None) -> None:
        self.conn = conn
        self.sids = sids
        self.shape = shape
        self.namespaces = namespaces
        self.counters = counters
        self.conns = conns if conns is not None else [conn] * len(sids)

    def attend(self, layer_idx: int, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               scaling: float, local_mask: torch.Tensor | None) -> torch.Tensor:
        h_q, m, d = query.shape[1:]
        q = query[0].float() * (scaling * d ** 0.5)  # the server scales by 1/sqrt(D)
        wire = q if m > 1 else q.repeat(1, 2, 1)
        blob = wire.contiguous().numpy().data.cast("B")
        try:
            replies = self._query(layer_idx, h_q, d, blob)
        except redis.ResponseError as exc:
            if not is_coldmiss(exc):
                raise
            self.counters.cold_rehydrates_observed += 1
            for seg_conn, ns in zip(self.conns, self.namespaces, strict=True):
                warm(seg_conn, ns, self.shape.n_kv_heads, self.shape.head_dim)
            replies = self._query(layer_idx, h_q, d, blob)
        rows = wire.shape[1]
        qf = query[0].float()
        mask = local_mask if local_mask is not None else (causal_mask(m, keys.shape[2])[0] if m > 1 else None)
        out, lse = attend(qf, keys[0].float(), values[0].float(), scaling, None if mask is None else mask[None])
        for reply in replies:
            flat = np.frombuffer(reply, dtype="<f4")
            seg_out = torch.from_numpy(flat[:h_q * rows * d].reshape(h_q, rows, d)[:, :m].copy())
            seg_lse = torch.from_numpy(flat[h_q * rows * d:].reshape(h_q, rows)[:, :m].copy())
            out, lse = merge(seg_out, seg_lse, out, lse)
        return out[None].to(query.dtype)

    def _query(self, layer_idx: int, h_q: int, d: int, blob: memoryview) -> list[bytes]:
        """Every segment's QUERY reply in chain order: one pipeline per owner connection."""
        self.counters.wire_calls += 1
        by_conn: dict[int, tuple[Any, list[int]]] = {}
        for index, seg_conn in enumerate(self.conns):
            by_conn.setdefault(id(seg_conn), (seg_conn, []))[1].append(index)
        replies: list[Any] = [None] * len(self.sids)
        for seg_conn, indices in by_conn.values():
            pipe = seg_conn.pipeline(transaction=False)
            for index in indices:
                pipe.execute_command("ATTEND.PREFIX.QUERY", self.sids[index], layer_idx, h_q, d, 0, blob)
            for index, reply in zip(indices, pipe.execute(raise_on_error=False), strict=True):
                replies[index] = reply
        for reply in replies:  # the server's own error (redis-py would prefix "Command # n ...")
            if isinstance(reply, Exception):
                raise reply
        return replies


class Stage2Restore:
    """Makes a chain's stored segments attendable and builds the lane; one per Engine."""

    def __init__(self, conn_fn: Any, shape: ModelShape) -> None:
        self.conn_fn = conn_fn  # () -> redis client or None (server down)
        self.shape = shape
        self.counters = Stage2Counters()
        self.redirects = 0  # segments found on another worker of -w N (module docstring)
        self._owners: dict[tuple[str, int], Any] = {}  # owner address -> its connection

    def restore(self, links: Sequence[ChainLink]) -> RemoteChain | None:
        """The longest leading run of ``links`` whose ATTEND side is (made) warm; None if none."""
        conn = self.conn_fn()
        if conn is None or not links:
            return None
        conns: list[Any] = []
        try:
            for link in links:
                seg_conn = self._warm_on_owner(conn, link.namespace)
                if seg_conn is None:
                    break
                conns.append(seg_conn)
        except redis.RedisError as exc:
            if not conns or "not found" not in str(exc):
                logger.info("stage 2: chain restore stopped after %d segment(s): %s", len(conns), exc)
        n = len(conns)
        if n == 0:
            return None
        chain = list(links[:n])
        lane = ChainLane(conn, [attend_sid(link.namespace) for link in chain], self.shape,
                         [link.namespace for link in chain], self.counters, conns)
        return RemoteChain(n, sum(link.n_tokens for link in chain), lane)

    def _warm_on_owner(self, conn: Any, ns: str) -> Any | None:
        """Make ``ns``'s ATTEND side warm; the connection it lives on (``conn``, or its owner's
        after one redirect), or None when WARM rebuilt fewer layers than the model has."""
        try:
            return conn if self._warm(conn, ns) else None
        except redis.ResponseError as exc:
            target = parse_redirect(exc)
            if target is None:
                raise
        self.redirects += 1
        owner = self._owners.get((target.host, target.port))
        if owner is None:
            pool = conn.connection_pool
            kwargs = {**pool.connection_kwargs, "host": target.host, "port": target.port}
            owner = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))
            self._owners[(target.host, target.port)] = owner
        return owner if self._warm(owner, ns) else None

    def _warm(self, conn: Any, ns: str) -> bool:
        states = lookup_layers(conn, attend_sid(ns), self.shape.n_layers)
        if all(state == "HIT" for state in states):
            return True
        return bool(warm(conn, ns, self.shape.n_kv_heads, self.shape.head_dim) == self.shape.n_layers)
