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
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
import torch

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
    """Prefix attention over several remote segments (in chain order) plus the local tokens."""

    def __init__(self, conn: Any, sids: list[str], shape: ModelShape, namespaces: list[str],
                 counters: Stage2Counters) -> None:
        self.conn = conn
        self.sids = sids
        self.shape = shape
        self.namespaces = namespaces
        self.counters = counters

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
            for ns in self.namespaces:
                warm(self.conn, ns, self.shape.n_kv_heads, self.shape.head_dim)
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
        self.counters.wire_calls += 1
        pipe = self.conn.pipeline(transaction=False)
        for sid in self.sids:
            pipe.execute_command("ATTEND.PREFIX.QUERY", sid, layer_idx, h_q, d, 0, blob)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies:  # the server's own error (redis-py would prefix "Command # n ...")
            if isinstance(reply, Exception):
                raise reply
        return list(replies)


class Stage2Restore:
    """Makes a chain's stored segments attendable and builds the lane; one per Engine."""

    def __init__(self, conn_fn: Any, shape: ModelShape) -> None:
        self.conn_fn = conn_fn  # () -> redis client or None (server down)
        self.shape = shape
        self.counters = Stage2Counters()

    def restore(self, links: Sequence[ChainLink]) -> RemoteChain | None:
        """The longest leading run of ``links`` whose ATTEND side is (made) warm; None if none."""
        conn = self.conn_fn()
        if conn is None or not links:
            return None
        n = 0
        try:
            for link in links:
                states = lookup_layers(conn, attend_sid(link.namespace), self.shape.n_layers)
                if any(state != "HIT" for state in states):
                    if warm(conn, link.namespace, self.shape.n_kv_heads, self.shape.head_dim) != self.shape.n_layers:
                        break
                n += 1
        except redis.RedisError as exc:
            if n == 0 or "not found" not in str(exc):
                logger.info("stage 2: chain restore stopped after %d segment(s): %s", n, exc)
        if n == 0:
            return None
        chain = list(links[:n])
        lane = ChainLane(conn, [attend_sid(link.namespace) for link in chain], self.shape,
                         [link.namespace for link in chain], self.counters)
        return RemoteChain(n, sum(link.n_tokens for link in chain), lane)
