"""``PionStore``: one namespace's per-layer K and V rows in pion-server, the original design's pion-lmcache API (docs/design.md).

What an LMCache storage plugin (the integrations issue) needs: register a namespace (a chunk of a
prompt), write each layer's K and V rows as the model produces them, ask whether a namespace is
complete, read a layer's rows back, drop it. Roles, by when they are called:

* ``register(ns, kv_dim, n_layers=...)`` — once per new namespace, before its rows. Creates
  ``<ns>_pk``/``<ns>_pv`` in the store's ``vquant`` format (KV.PREFIX.REGISTER). Idempotent for the
  same shape; a different shape raises ``redis.ResponseError``.
* ``store_layer(ns, "K"|"V", layer=, token_offset=, tensor_fp32=)`` — once per layer and side,
  after its prefill. Rows ``[n_tokens, kv_dim]`` (numpy or a CPU torch tensor, any float dtype,
  sent as little-endian fp32; the server encodes them). Returns the rows the layer now holds.
* ``lookup(ns)`` — before a restore: True once every registered layer of both sides holds the
  same token count when registered with ``n_layers`` (without it: once both sessions exist) —
  KV.PREFIX.LOOKUP, answered by any worker of ``-w N``.
* ``fetch_layer(ns, "K"|"V", layer=, start=, end=)`` — per layer on a hit: fp32 rows
  ``[end - start, kv_dim]`` as a new numpy array the caller owns.
* ``drop(ns)`` — True when something was dropped.

Under ``pion-server -w N`` a namespace lives on the worker that registered it; a command sent to
another worker is answered ``-ERR <command> session lives on worker N <host:port>``. With
``auto_redirect=True`` (the default) the store reconnects to that worker, retries the command
once and counts it in ``redirects``; with False the ``redis.ResponseError`` reaches the caller.
Failures are ``redis.RedisError`` (connection, refused command) or ``ValueError`` (a bad side
or tensor shape, raised before anything is sent).

Example::

    with PionStore(port=1974, vquant="fp16") as s:
        s.register("my_app|prompt_a", kv_dim=128, n_layers=2)
        s.store_layer("my_app|prompt_a", "V", layer=0, token_offset=0, tensor_fp32=v)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

import numpy as np
import redis

from pion.client.connection import PionClient
from pion.common.ids import k_session, v_session
from pion.common.ports import DEFAULT_HOST, PION_SERVER_PORT

Side = Literal["K", "V", "k", "v"]
T = TypeVar("T")


class PionStore:
    """Per-layer K/V of namespaces in pion-server (module docstring).

    Args:
        host, port, password: the server (any worker's address, or the shared port).
        vquant: storage format of new namespaces (``fp16``, ``fp32``, ``int8``, ``fp8``, ``turbo4``...).
        auto_redirect: follow ``session lives on worker N`` (reconnect, retry once).
        socket_timeout_s: per-command read timeout.
    """

    def __init__(self, host: str = DEFAULT_HOST, port: int = PION_SERVER_PORT, vquant: str = "fp16",
                 password: str | None = None, auto_redirect: bool = True, *,
                 socket_timeout_s: float = 30.0) -> None:
        self.vquant = vquant
        self.auto_redirect = auto_redirect
        self.client = PionClient(host, port, password, socket_timeout_s=socket_timeout_s)
        self._kv_dim: dict[str, int] = {}

    @property
    def redirects(self) -> int:
        """How many times a command was redirected to another worker (and retried there)."""
        return self.client.redirects

    def worker(self) -> int:
        """The worker this store's connection is on now (PION.WORKER; 0 on a single server)."""
        reply = self.client.redis.execute_command("PION.WORKER")
        fields = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
        return int(fields[b"id"] if b"id" in fields else fields["id"])

    # ---- the API ---------------------------------------------------------------------------
    def register(self, ns: str, kv_dim: int, *, n_layers: int | None = None, prefill_ms: float | None = None) -> None:
        """Create the namespace's K and V sessions (``n_layers``: LOOKUP waits for all of them)."""
        self._call(lambda: self.client.kv_prefix_register(ns, kv_dim, self.vquant, layers=n_layers,
                                                          prefill_ms=prefill_ms))
        self._kv_dim[ns] = kv_dim

    def store_layer(self, ns: str, kind: Side, *, layer: int, token_offset: int, tensor_fp32: Any) -> int:
        """Write rows ``[n_tokens, kv_dim]`` of one layer at ``token_offset``; returns the layer's row count."""
        sid = self._session(ns, kind)
        rows = np.ascontiguousarray(_as_numpy(tensor_fp32), dtype="<f4")
        if rows.ndim != 2:
            raise ValueError(f"tensor_fp32 must be [n_tokens, kv_dim], got shape {rows.shape}")
        kv_dim = self._kv_dim.get(ns)
        if kv_dim is not None and rows.shape[1] != kv_dim:
            raise ValueError(f"tensor_fp32 has {rows.shape[1]} values per row, {ns!r} was registered with {kv_dim}")
        blob = rows.data.cast("B")
        return self._call(lambda: self.client.v_storebatch(sid, layer, token_offset, blob, dtype="f32"))

    def fetch_layer(self, ns: str, kind: Side, *, layer: int, start: int, end: int) -> np.ndarray:
        """fp32 rows ``start..end`` (end exclusive) of one layer as ``[end - start, kv_dim]``."""
        sid = self._session(ns, kind)
        data = self._call(lambda: self.client.v_fetch(sid, layer, start, end, dtype="f32"))
        flat = np.frombuffer(data, dtype="<f4")
        n = end - start
        return flat.reshape(n, flat.size // n if n else 0).copy()

    def lookup(self, ns: str) -> bool:
        """True when every registered layer of both sides holds its rows (any worker answers)."""
        return self._call(lambda: self.client.kv_prefix_lookup(ns))

    def drop(self, ns: str) -> bool:
        """Drop the namespace (on whichever worker holds it); True when it existed."""
        self._kv_dim.pop(ns, None)
        return self._call(lambda: self.client.kv_prefix_drop(ns)) > 0

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> PionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals -------------------------------------------------------------------------
    @staticmethod
    def _session(ns: str, kind: Side) -> str:
        side = kind.upper()
        if side == "K":
            return k_session(ns)
        if side == "V":
            return v_session(ns)
        raise ValueError(f"kind must be 'K' or 'V', got {kind!r}")

    def _call(self, send: Callable[[], T]) -> T:
        try:
            return send()
        except redis.ResponseError as exc:
            if not (self.auto_redirect and self.client.follow_redirect(exc)):
                raise
        return send()  # once, on the worker that owns the namespace


def _as_numpy(tensor: Any) -> np.ndarray:
    """numpy as is; a torch tensor (any device or dtype) as float32 numpy, without importing torch."""
    if isinstance(tensor, np.ndarray):
        return tensor
    detach = getattr(tensor, "detach", None)
    if callable(detach):
        return np.asarray(detach().float().cpu().numpy())
    return np.asarray(tensor)
