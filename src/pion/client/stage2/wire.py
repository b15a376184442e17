"""RESP spelling of the ATTEND.PREFIX.* commands a stage-2 client sends (over redis-py).

Kept beside the stage-2 client rather than in ``pion.client.connection`` so the prefix transport
there can be refactored independently; every function takes a ``PionClient`` or a pipeline of it
(anything with ``.redis``-style ``execute_command``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import redis

COLDMISS = "COLDMISS"


class ColdMissError(RuntimeError):
    """The server demoted this layer: rehydrate with KV.PREFIX.WARM and retry."""


def is_coldmiss(exc: BaseException) -> bool:
    """A ``-COLDMISS`` answer, also when redis-py wrapped it as a pipeline's ``Command # n`` error."""
    if not isinstance(exc, redis.ResponseError):
        return False
    text = str(exc)
    return text.startswith(COLDMISS) or f"caused error: {COLDMISS}" in text


def attend_sid(namespace: str) -> str:
    """The ATTEND-side session of a prefix namespace (the original design's ``<namespace>_attn``)."""
    return f"{namespace}_attn"


def store_layer(pipe: Any, sid: str, layer: int, keys: np.ndarray, values: np.ndarray) -> None:
    """Queue ``ATTEND.PREFIX.STORE`` for fp32 ``[H, N, D]`` K and V."""
    h, n, d = keys.shape
    pipe.execute_command("ATTEND.PREFIX.STORE", sid, layer, h, n, d, keys.data.cast("B"),
                         values.data.cast("B"))


def lookup_layers(conn: Any, sid: str, n_layers: int) -> list[str]:
    """``ATTEND.PREFIX.LOOKUP`` of every layer in one round trip -> ``HIT``/``COLD``/``MISS`` each."""
    pipe = conn.pipeline(transaction=False)
    for layer in range(n_layers):
        pipe.execute_command("ATTEND.PREFIX.LOOKUP", sid, layer)
    return [r.decode() if isinstance(r, bytes) else str(r) for r in pipe.execute()]


def warm(conn: Any, namespace: str, n_kv_heads: int, head_dim: int) -> int:
    """``KV.PREFIX.WARM``: rebuild the ATTEND side from the V-store; returns layers rehydrated."""
    reply = conn.execute_command("KV.PREFIX.WARM", namespace, n_kv_heads, head_dim, attend_sid(namespace))
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return int(text.split()[0])


def query_fused(conn: Any, sid: str, layer: int, q: np.ndarray, k_loc: np.ndarray, v_loc: np.ndarray) -> bytes:
    """``ATTEND.PREFIX.QUERY_FUSED`` with the standard head grouping; raises ColdMissError."""
    h_q, _, d = q.shape
    h_kv, s, _ = k_loc.shape
    try:
        return conn.execute_command(  # type: ignore[no-any-return]
            "ATTEND.PREFIX.QUERY_FUSED", sid, layer, h_q, d, s, h_kv, q.data.cast("B"),
            k_loc.data.cast("B"), v_loc.data.cast("B"), b"")
    except redis.ResponseError as exc:
        if is_coldmiss(exc):
            raise ColdMissError(str(exc)) from exc
        raise


def query_sparse_auto_fused(conn: Any, sid: str, layer: int, q: np.ndarray, k_loc: np.ndarray, v_loc: np.ndarray,
                            block: int, k_top: int) -> bytes:
    """``ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED`` (server-picked prefix blocks + dense suffix); ColdMissError."""
    h_q, _, d = q.shape
    h_kv, s, _ = k_loc.shape
    try:
        return conn.execute_command(  # type: ignore[no-any-return]
            "ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED", sid, layer, h_q, d, block, k_top, h_kv, s, q.data.cast("B"),
            k_loc.data.cast("B"), v_loc.data.cast("B"), b"")
    except redis.ResponseError as exc:
        if is_coldmiss(exc):
            raise ColdMissError(str(exc)) from exc
        raise
