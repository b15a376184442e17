"""One prefix transport: how a prefix's K/V travels between a client process and pion-server.

Both users go through it: ``PionPromptCache`` (one namespace per prefix) and pion-llm's
``PionSegmentStore`` (a prompt as a chain of segment namespaces). Roles, by when they are called:

* ``queue_store(pipe, ns, rows, n_tokens, ...)`` / ``store(...)`` — after a prefill, once per new
  prefix or segment. Queues ``KV.PREFIX.REGISTER`` (``.SCHEMA`` when the layer formats differ)
  and one ``V.STOREBATCH`` per layer and side. ``store`` sends the register first, on its own,
  and the rows only once it is admitted: a server under ``--admission 2hit`` answers a
  namespace's first register ``+DEFERRED``, and then nothing is sent (``StoreOutcome.deferred``;
  the caller keeps its local prefill). The extra round trip (~0.1 ms on loopback) rides on a
  cold path that has just run a whole prefill. Rows travel
  as fp16 (fp32 for an fp32 session: every other format is at most fp16-precise) and the server
  encodes them in the storage format. LOOKUP answers +HIT only after every layer is stored.
* ``queue_fetch(pipe, ns, n_tokens)`` + ``decode(k_reply, v_reply, n_tokens)`` / ``restore(ns, n)``
  / ``fetch_chain(segments)`` — on a hit, once per request. Two ``V.MFETCH`` per namespace (all K
  layers, all V layers). Quantized formats travel *raw* (the stored bytes) and are decoded here
  with ``pion.codecs``: measured 3–4× faster than asking the server for ``DTYPE f16``
  (benchmarks/restore_dtype.py). fp16/fp32 travel raw too, which is byte-identical to their
  float form, and become zero-copy views of the reply. ``restore_dtype="f16"`` asks the server
  to decode instead.

Under ``pion-server -w N`` a store or restore answered ``-ERR ... session lives on worker N
<host:port>`` is sent once more to that worker (``PionClient.follow_redirect``; the client stays
there). Otherwise nothing here catches errors: a redis error (connection, -ERR for a missing session) propagates
from ``store``/``restore``; ``decode`` raises ValueError for a reply of the wrong shape. Callers
decide what a failure means (the prompt cache prefills locally, pion-llm serves uncached).
``fetch_chain`` is the exception by design: a segment that is missing or malformed ends the
chain there (its rows are useless without it), so it returns the prefix of the chain it could
restore.

Importing this module imports no torch (the MLX runtime's ``[mlx]`` install has none): rows
travel as numpy arrays, and the two torch-facing parts import it when called — ``decode`` /
``decode_layer`` (they build tensors) and the default ``RowSource`` dtype argument (a torch dtype,
what the transformers callers' row sources convert to; ``numpy_rows=True`` passes numpy's
``float16``/``float32`` instead).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import redis

from pion.client.block_hashes import BlockTable
from pion.client.connection import FetchDtype, PionClient, PionPipeline, StoreDtype
from pion.client.kv_shape import KvShape
from pion.codecs import get_codec
from pion.common.ids import Namespace, k_session, v_session

if TYPE_CHECKING:
    import torch

    from pion.client.runtimes.transformers_kv import RestoredKv

logger = logging.getLogger(__name__)

# Formats whose stored bytes are plain little-endian floats: fetched raw and viewed without decoding.
FLOAT_FORMATS: dict[str, Any] = {"fp16": np.float16, "fp32": np.float32}
RestoreDtype = Literal["auto", "f16", "raw"]
Side = Literal["k", "v"]
# (side, layer, wire dtype: torch.float16/float32, or numpy's with numpy_rows=True) -> contiguous
# [n_tokens, kv_dim] rows on the CPU
RowSource = Callable[[Side, int, Any], np.ndarray]
# (side, layer) -> rows already encoded in the layer's format ([n_tokens, row_bytes] uint8, sent
# DTYPE raw), or None to send that layer through the RowSource (e.g. an MLX QuantizedKVCache)
EncodedRowSource = Callable[[Side, int], np.ndarray | None]


@dataclass(frozen=True)
class LayerFormats:
    """The storage format of every layer, per side.

    ``schema`` says how the prefix is registered: True uses KV.PREFIX.REGISTER.SCHEMA (one format
    per layer and side), False KV.PREFIX.REGISTER with the single format ``k[0]``.
    """

    k: tuple[str, ...]
    v: tuple[str, ...]
    schema: bool = False

    @classmethod
    def uniform(cls, fmt: str, n_layers: int) -> LayerFormats:
        return cls((fmt,) * n_layers, (fmt,) * n_layers)

    @classmethod
    def boundary_protected(cls, fmt: str, n_layers: int, n_protected: int) -> LayerFormats:
        """K fp16 everywhere; V fp16 on the first and last ``n_protected`` layers, ``fmt`` between.

        ``n_protected == 0`` is the uniform layout (registered without a schema).
        """
        if n_protected < 0:
            raise ValueError(f"boundary_protect must be >= 0, got {n_protected}")
        if n_protected == 0:
            return cls.uniform(fmt, n_layers)
        v = tuple("fp16" if i < n_protected or i >= n_layers - n_protected else fmt for i in range(n_layers))
        return cls(("fp16",) * n_layers, v, schema=True)

    @classmethod
    def mixed(cls, k_fmt: str, v_fmt: str, n_layers: int, n_protected: int = 0, edge_k: str = "fp16",
              edge_v: str = "fp16") -> LayerFormats:
        """K in ``k_fmt`` and V in ``v_fmt`` (e.g. the KIVI pair kivi4g64 / mlx4g32), with the first and
        last ``n_protected`` layers in ``edge_k`` / ``edge_v`` (fp16 unless given: the boundary layers
        are the most sensitive). Registered with SCHEMA unless one format covers everything.
        """
        if n_protected < 0:
            raise ValueError(f"n_protected must be >= 0, got {n_protected}")

        def side(fmt: str, edge: str) -> tuple[str, ...]:
            return tuple(edge if i < n_protected or i >= n_layers - n_protected else fmt for i in range(n_layers))
        k, v = side(k_fmt, edge_k), side(v_fmt, edge_v)
        return cls(k, v, schema=not (k == v and len(set(k)) == 1))

    def of(self, side: Side) -> tuple[str, ...]:
        return self.k if side == "k" else self.v


class StoreOutcome(NamedTuple):
    """What ``PrefixTransport.store`` did: the refused commands' errors, the row bytes sent, and
    whether the server deferred the prefix (``+DEFERRED``: nothing was sent or stored)."""

    errors: list[Exception]
    nbytes: int
    deferred: bool = False


def store_wire_dtype(fmt: str) -> StoreDtype:
    """fp32 sessions get exact floats; every other format is at most fp16-precise, so half the bytes."""
    return "f32" if fmt == "fp32" else "f16"


def fetch_wire_dtype(formats: Sequence[str], restore_dtype: RestoreDtype) -> FetchDtype:
    """``raw`` unless the caller asked the server to decode a quantized format (``"f16"``)."""
    if all(f in FLOAT_FORMATS for f in formats) or restore_dtype != "f16":
        return "raw"
    return "f16"


def decode_layer(data: bytes, fmt: str, wire: FetchDtype, kv_dim: int) -> torch.Tensor:
    """Reply bytes of one layer as a flat float tensor of ``n_tokens * kv_dim`` values."""
    import torch

    from pion.client.runtimes.transformers_kv import frombuffer

    if wire == "f16" or (wire == "raw" and fmt == "fp16"):
        return frombuffer(data, torch.float16)
    if wire == "f32" or (wire == "raw" and fmt == "fp32"):
        return frombuffer(data, torch.float32)
    rows = get_codec(fmt).decode(data, kv_dim, np.float32)
    return torch.from_numpy(np.ascontiguousarray(rows))


def stacked_rows(keys: torch.Tensor, values: torch.Tensor) -> RowSource:
    """A ``RowSource`` over ``[n_layers, n_kv_heads, n_tokens, head_dim]`` tensors (pion-llm's segments)."""
    def rows(side: Side, layer: int, dtype: Any) -> np.ndarray:
        states = (keys if side == "k" else values)[layer]
        n_heads, n_tokens, head_dim = states.shape
        flat = states.transpose(0, 1).reshape(n_tokens, n_heads * head_dim)
        return flat.to(device="cpu", dtype=dtype).contiguous().numpy()
    return rows


class PrefixTransport:
    """Stores and restores prefixes of one model geometry and one set of layer formats.

    Args:
        client: the connection; pipelines are opened on it per call.
        shape: the model's K/V geometry.
        formats: storage format of every layer and side.
        restore_dtype: ``"auto"``/``"raw"`` decode here (measured faster), ``"f16"`` on the server.
        numpy_rows: pass row sources numpy's float16/float32 as the wire dtype (no torch import);
            False passes torch's (the transformers callers').
    """

    def __init__(self, client: PionClient, shape: KvShape, formats: LayerFormats,
                 restore_dtype: RestoreDtype = "auto", *, numpy_rows: bool = False) -> None:
        if len(formats.k) != shape.n_layers or len(formats.v) != shape.n_layers:
            raise ValueError(f"formats cover {len(formats.k)}/{len(formats.v)} layers, model has {shape.n_layers}")
        for fmt in {*formats.k, *formats.v}:
            get_codec(fmt).check_dim(shape.kv_dim)  # unknown format / bad kv_dim: fail now, loudly
        self.client = client
        self.shape = shape
        self.formats = formats
        self.k_wire = fetch_wire_dtype(formats.k, restore_dtype)
        self.v_wire = fetch_wire_dtype(formats.v, restore_dtype)
        self.numpy_rows = numpy_rows

    def _row_dtypes(self) -> tuple[Any, Any]:
        """The (f16, f32) wire dtypes handed to a ``RowSource``."""
        if self.numpy_rows:
            return np.float16, np.float32
        import torch

        return torch.float16, torch.float32

    # ---- store ---------------------------------------------------------------------------------

    def queue_store(self, pipe: PionPipeline, ns: Namespace | str, rows: RowSource, *,
                    blocks: BlockTable | None = None, prefill_ms: float | None = None,
                    admit: bool = False, encoded: EncodedRowSource | None = None) -> int:
        """Queue the register and every layer's rows in one pipeline; returns the bytes queued.

        For a cache fill prefer ``store`` (a deferred register would fail the rows); ``admit``
        makes the register bypass the server's admission policy (an explicit ingest); ``encoded``
        as in ``queue_rows``."""
        self.queue_register(pipe, ns, blocks=blocks, prefill_ms=prefill_ms, admit=admit)
        return self.queue_rows(pipe, ns, rows, encoded)

    def queue_register(self, pipe: PionPipeline, ns: Namespace | str, *, blocks: BlockTable | None = None,
                       prefill_ms: float | None = None, admit: bool = False) -> None:
        """Queue the prefix's KV.PREFIX.REGISTER[.SCHEMA] (its reply: True +OK, False +DEFERRED)."""
        shape, formats = self.shape, self.formats
        if formats.schema:
            pipe.kv_prefix_register_schema(ns, shape.kv_dim, formats.k, formats.v, blocks=blocks,
                                           prefill_ms=prefill_ms, admit=admit)
        else:
            pipe.kv_prefix_register(ns, shape.kv_dim, formats.k[0], blocks=blocks, layers=shape.n_layers,
                                    prefill_ms=prefill_ms, admit=admit)

    def queue_rows(self, pipe: PionPipeline, ns: Namespace | str, rows: RowSource,
                   encoded: EncodedRowSource | None = None) -> int:
        """Queue one V.STOREBATCH per layer and side of a registered prefix; returns the bytes queued.

        ``encoded`` lets a caller that already holds a layer in its storage format send those bytes
        as they are (``DTYPE raw``: no decode and re-encode, so they are stored byte for byte).
        """
        formats = self.formats
        nbytes = 0
        f16, f32 = self._row_dtypes()
        sides: tuple[tuple[Side, str], ...] = (("k", k_session(ns)), ("v", v_session(ns)))
        for side, sid in sides:
            for layer, fmt in enumerate(formats.of(side)):
                ready = encoded(side, layer) if encoded is not None else None
                wire: StoreDtype = store_wire_dtype(fmt) if ready is None else "raw"
                layer_rows = (ready if ready is not None
                              else rows(side, layer, f32 if wire == "f32" else f16))
                nbytes += layer_rows.nbytes
                blob = memoryview(layer_rows).cast("B")  # type: ignore[arg-type]  # ndarray is a buffer
                pipe.v_storebatch(sid, layer, 0, blob, dtype=wire)
        return nbytes

    def store(self, ns: Namespace | str, rows: RowSource, *, blocks: BlockTable | None = None,
              prefill_ms: float | None = None, encoded: EncodedRowSource | None = None) -> StoreOutcome:
        """Register one prefix, then store its rows if the server admitted it (two round trips).

        A connection failure raises (redis.RedisError); a refused command comes back in
        ``errors``; a ``+DEFERRED`` register (``--admission 2hit``) returns ``deferred=True`` with
        nothing sent. Called once per new prefix, after its prefill.
        """
        for attempt in (0, 1):
            pipe = self.client.pipeline()
            self.queue_register(pipe, ns, blocks=blocks, prefill_ms=prefill_ms)
            (admitted,) = pipe.execute(raise_on_error=False)
            if not (attempt == 0 and isinstance(admitted, Exception) and self.client.follow_redirect(admitted)):
                break  # (a redirect: the prefix lives on another worker; register it there, once)
        if isinstance(admitted, Exception):
            return StoreOutcome([admitted], 0)
        if admitted is False:
            return StoreOutcome([], 0, deferred=True)
        pipe = self.client.pipeline()  # the worker that admitted the name holds its sessions
        nbytes = self.queue_rows(pipe, ns, rows, encoded)
        replies = pipe.execute(raise_on_error=False)
        return StoreOutcome([r for r in replies if isinstance(r, Exception)], nbytes)

    # ---- restore -------------------------------------------------------------------------------

    def queue_fetch(self, pipe: PionPipeline, ns: Namespace | str, n_tokens: int) -> None:
        """Queue the two V.MFETCH of one prefix (K layers, then V layers)."""
        pipe.v_mfetch(k_session(ns), 0, self.shape.n_layers, 0, n_tokens, dtype=self.k_wire)
        pipe.v_mfetch(v_session(ns), 0, self.shape.n_layers, 0, n_tokens, dtype=self.v_wire)

    def decode(self, k_reply: Sequence[bytes], v_reply: Sequence[bytes], n_tokens: int) -> RestoredKv:
        """The two V.MFETCH replies as a ``RestoredKv``; ValueError when a reply has the wrong shape."""
        from pion.client.runtimes.transformers_kv import RestoredKv

        restored = RestoredKv(self.shape, n_tokens)
        sides: tuple[tuple[Side, Sequence[bytes], FetchDtype], ...] = (("k", k_reply, self.k_wire),
                                                                       ("v", v_reply, self.v_wire))
        for side, layers, wire in sides:
            if len(layers) != self.shape.n_layers:
                raise ValueError(f"V.MFETCH returned {len(layers)} layers for side {side}, "
                                 f"expected {self.shape.n_layers}")
            for layer, (data, fmt) in enumerate(zip(layers, self.formats.of(side), strict=True)):
                restored.set_layer(side, layer, decode_layer(data, fmt, wire, self.shape.kv_dim))
        return restored

    def fetch(self, ns: Namespace | str, n_tokens: int) -> tuple[list[bytes], list[bytes]]:
        """The raw K and V replies of one prefix in one round trip (raises on any error)."""
        try:
            return self._fetch_once(ns, n_tokens)
        except redis.ResponseError as exc:
            if not self.client.follow_redirect(exc):
                raise
        return self._fetch_once(ns, n_tokens)  # on the worker that owns it

    def _fetch_once(self, ns: Namespace | str, n_tokens: int) -> tuple[list[bytes], list[bytes]]:
        pipe = self.client.pipeline()
        self.queue_fetch(pipe, ns, n_tokens)
        k_reply, v_reply = pipe.execute()
        return k_reply, v_reply

    def restore(self, ns: Namespace | str, n_tokens: int) -> RestoredKv:
        """Fetch and decode one prefix (raises redis errors and ValueError)."""
        k_reply, v_reply = self.fetch(ns, n_tokens)
        return self.decode(k_reply, v_reply, n_tokens)

    def fetch_chain(self, segments: Sequence[tuple[Namespace, int]]) -> list[RestoredKv]:
        """The longest restorable prefix of a chain of ``(namespace, n_tokens)``, root first.

        Every segment is fetched speculatively in one round trip (a missing one answers -ERR, which
        costs nothing). A connection failure raises; a missing or malformed segment ends the chain.
        """
        if not segments:
            return []
        pipe = self.client.pipeline()
        for ns, n_tokens in segments:
            self.queue_fetch(pipe, ns, n_tokens)
        replies = pipe.execute(raise_on_error=False)
        # The chain's root lives on another worker: fetch it all there (its segments were stored
        # through one connection, so they live together). A later segment elsewhere ends the chain.
        if isinstance(replies[0], Exception) and self.client.follow_redirect(replies[0]):
            pipe = self.client.pipeline()  # the chain lives on another worker: once more, there
            for ns, n_tokens in segments:
                self.queue_fetch(pipe, ns, n_tokens)
            replies = pipe.execute(raise_on_error=False)
        out: list[RestoredKv] = []
        for i, (ns, n_tokens) in enumerate(segments):
            k_reply, v_reply = replies[2 * i], replies[2 * i + 1]
            if isinstance(k_reply, Exception) or isinstance(v_reply, Exception):
                break
            try:
                out.append(self.decode(k_reply, v_reply, n_tokens))
            except ValueError as exc:
                logger.warning("segment %s has unexpected rows (%s); treated as missing", ns, exc)
                break
        return out
