"""PionPromptCache: share a prompt prefix's K/V through pion-server (Stage 1: restore, then run).

Roles, in the order a request meets them:
  * ``namespace_for(prefix_ids)`` — derive the key (model identity, config, tokenizer, rope, dtype,
    storage format, the token ids; ``pion.client.namespaces``); or ``make_namespace(*parts)``.
  * ``get_or_prefill(prefix_ids, namespace)`` — called once per request; returns a fresh transformers
    ``DynamicCache`` holding the prefix, which the caller owns and may extend.
      - hit:  KV.PREFIX.LOOKUP → +HIT, then one pipelined round trip of two V.MFETCH (all K layers,
        all V layers), decoded by ``pion.client.prefix_transport`` (the transport pion-llm uses too).
      - miss: local prefill (timed), then one pipelined round trip of
        KV.PREFIX.REGISTER[.SCHEMA] … LAYERS n PREFILL_MS ms BLOCKS 64 … and V.STOREBATCH for every
        layer and side. LOOKUP answers +HIT only once all layers are stored, so no reader sees half.
      - failure: any error on the hit path (prefix evicted between LOOKUP and FETCH, connection
        dropped) logs a warning and prefills locally; nothing raises. A failed store only warns.
  * ``lookup``, ``stats``, ``close`` — probes, counters, teardown (also a context manager).

A server that is down at construction makes the cache local-only (with a warning): every call
prefills locally. A server that goes away later is retried on each call.

``boundary_protect=N`` (heterogeneous K/V, docs/runtime.md): K fp16 on every layer; V fp16 on the first
N and last N layers and ``vquant`` in between, registered with KV.PREFIX.REGISTER.SCHEMA so the
prefix has the same LOOKUP semantics as a uniform one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis

from pion.client.block_hashes import DEFAULT_BLOCK_SIZE, block_table
from pion.client.connection import DEFAULT_HOST, DEFAULT_PORT, PionClient
from pion.client.hybrid_store import account_store
from pion.client.kv_shape import KvShape
from pion.client.namespaces import make_namespace, model_fingerprint, prefix_namespace
from pion.client.prefix_transport import (
    EncodedRowSource, LayerFormats, PrefixTransport, RestoreDtype, RowSource, Side,
)
from pion.codecs import get_codec
from pion.common.ids import Namespace

logger = logging.getLogger(__name__)
__all__ = ["PionPromptCache", "PromptCacheStats", "RestoreDtype"]


@dataclass
class PromptCacheStats:
    """Counters kept by one PionPromptCache (``stats()`` returns them as a dict)."""

    hits: int = 0
    misses: int = 0
    fallbacks: int = 0
    store_failures: int = 0
    deferred: int = 0  # stores the server deferred (--admission 2hit): prefilled here, not stored
    fetch_ms_total: float = 0.0
    store_ms_total: float = 0.0
    prefill_ms_total: float = 0.0
    bytes_fetched: int = 0
    bytes_stored: int = 0
    last_restore_ms: dict[str, float] = field(default_factory=dict)


class PionPromptCache:
    """Prefix K/V cache for a transformers model, shared through pion-server.

    Args:
        model: a transformers causal LM (e.g. from ``pion.load_model``).
        vquant: storage format (a ``pion.codecs`` name: fp16, fp32, int8, fp8, turbo4, mlx4g32 ...).
        boundary_protect: N > 0 keeps K and the first/last N layers of V in fp16 (SCHEMA register).
        host, port, password: the pion-server; ignored when ``client`` is given.
        client: an existing ``PionClient`` to share.
        tokenizer: when given, its vocabulary hash goes into ``namespace_for``.
        block_size: tokens per block in the registered block-hash table.
        restore_dtype: how quantized formats travel on a hit: ``"f16"`` (server decodes) or ``"raw"``
            (stored bytes, decoded here with ``pion.codecs``); ``"auto"`` is the measured faster one,
            raw. fp16/fp32 always travel raw, which is byte-identical to their float form.
        materialize: False (default) returns a cache whose layers are zero-copy fp16/fp32 views of
            the reply; the first forward converts them to the model dtype as it appends the suffix.
            True converts up front into contiguous model-dtype tensors (one more pass over the prefix).
        stage2: also keep the prefix attendable in pion-server (ATTEND.PREFIX.STORE per layer);
            ``get_or_prefill`` then returns a stage-2 cache (``pion.client.stage2``) instead of
            restoring K/V. ``stage2_lane``: ``"auto"`` (in-process → binary → RESP), ``"binary"``,
            ``"resp"``. ``stage2_binary_port``: the binary lane's port (default: the lane of the
            worker the connection is on under ``-w N``, else the RESP port + 1).
            ``stage2_follow_redirects``: under ``-w N`` follow a worker's redirect to the prefix's
            owner on the stage-2 RESP calls and the binary lane (default True).
        layer_formats: an explicit format per layer and side (``LayerFormats.mixed``, e.g. the KIVI
            pair: K ``kivi4g64``, V ``mlx4g32``); replaces ``vquant``/``boundary_protect``.
    """

    def __init__(self, model: Any, vquant: str = "fp16", boundary_protect: int = 0, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT, password: str | None = None, client: PionClient | None = None, *,
                 tokenizer: Any | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 restore_dtype: RestoreDtype = "auto", materialize: bool = False, stage2: bool = False,
                 stage2_lane: str = "auto", layer_formats: LayerFormats | None = None,
                 stage2_binary_port: int | None = None, stage2_follow_redirects: bool = True) -> None:
        self.model = model
        self.vquant = vquant
        self.boundary_protect = int(boundary_protect)
        self.hybrid, self.shape, self._fingerprint = self._describe_model(model, tokenizer)
        if self.hybrid is not None and self.boundary_protect:
            raise ValueError("boundary_protect is not supported for hybrid/recurrent models")
        self.block_size = block_size
        self.restore_dtype = restore_dtype
        self.materialize = materialize
        self.formats = layer_formats or LayerFormats.boundary_protected(vquant, self.shape.n_layers,
                                                                        self.boundary_protect)
        self._explicit_formats = layer_formats is not None
        self.k_formats, self.v_formats = list(self.formats.k), list(self.formats.v)
        for fmt in {*self.k_formats, *self.v_formats}:
            get_codec(fmt).check_dim(self.shape.kv_dim)  # unknown format / bad kv_dim: fail now, loudly
        self._stats = PromptCacheStats()
        self._owns_client = client is None
        self.client: PionClient | None = client or PionClient(host, port, password)
        try:
            self.client.ping()
        except redis.RedisError as exc:
            logger.warning("pion-server at %s:%s is not reachable (%s); PionPromptCache runs local-only",
                           host, port, exc)
            if self._owns_client:
                self.client.close()
            self.client = None
        self._transport = (PrefixTransport(self.client, self.shape, self.formats, restore_dtype,
                                           numpy_rows=self._numpy_rows)
                           if self.client is not None else None)
        self.stage2 = self._make_stage2(stage2_lane) if stage2 else None
        if self.stage2 is not None:  # (set after: the MLX subclass builds its own Stage2Support)
            self.stage2._binary_port = stage2_binary_port
            self.stage2.follow_redirects = stage2_follow_redirects

    # ---- what a runtime provides (pion.client.mlx_prompt_cache overrides these for mlx-lm) ----
    # (torch and the transformers helpers are imported inside them, so the MLX subclass loads no torch)

    _numpy_rows = False  # row sources get torch dtypes (see PrefixTransport's numpy_rows)

    def _describe_model(self, model: Any, tokenizer: Any | None) -> tuple[Any, KvShape, tuple[str, ...]]:
        """(recurrent-layer transport or None, K/V geometry, namespace fingerprint); called once by __init__."""
        from pion.client.hybrid_prefix import hybrid_transport_for

        hybrid = hybrid_transport_for(model)  # recurrent layers present: pion.client.hybrid_prefix
        shape = hybrid.kv_shape if hybrid is not None else KvShape.from_config(model.config)
        return hybrid, shape, model_fingerprint(model, tokenizer)

    def _make_stage2(self, lane: str) -> Any:
        from pion.client.stage2.support import Stage2Support  # transformers hooks load only for stage 2

        return Stage2Support(self, lane)

    def _row_sources(self, cache: Any, n_tokens: int) -> tuple[RowSource, EncodedRowSource | None]:
        """Where ``_store`` reads a prefilled cache's rows: float rows, and already-encoded ones (or None)."""
        from pion.client.runtimes.transformers_kv import layer_rows

        def rows(side: Side, layer: int, dtype: Any) -> np.ndarray:
            return layer_rows(cache, layer, side, n_tokens, dtype)
        return rows, None

    # ---- namespaces -------------------------------------------------------------------------

    @staticmethod
    def make_namespace(*parts: object) -> Namespace:
        """sha256("|".join(parts))[:32]: a namespace from parts the caller chose."""
        return make_namespace(*parts)

    @property
    def format_descriptor(self) -> str:
        """The storage format as it affects restored values (vquant plus boundary protection)."""
        if self._explicit_formats:
            return f"k={','.join(self.formats.k)}/v={','.join(self.formats.v)}"
        return f"{self.vquant}/bp{self.boundary_protect}"

    def namespace_for(self, prefix_ids: Sequence[int], *extra: object) -> Namespace:
        """A namespace derived from everything that determines the prefix's K/V.

        Covers the model identity, config hash, tokenizer hash, rope settings, weights dtype, storage
        format and the prefix token ids; ``extra`` adds anything else (an adapter id, a tenant).
        """
        layout = () if self.hybrid is None else (f"layout={self.hybrid.layout}",)
        return prefix_namespace(self._fingerprint, self.format_descriptor, prefix_ids, *layout, *extra)

    # ---- the request path -------------------------------------------------------------------

    @property
    def local_only(self) -> bool:
        """True when the server was unreachable at construction."""
        return self.client is None

    def lookup(self, namespace: Namespace | str) -> bool:
        """True when the server holds the whole prefix (+HIT); False on +MISS, local-only or error."""
        if self.client is None:
            return False
        try:
            hit = bool(self.client.kv_prefix_lookup(namespace))
            # stage 2: a V-store HIT with a cold ATTEND side is not a hit (the push must not be skipped)
            return hit and (self.stage2 is None or self.stage2.attend_warm(str(namespace)))
        except redis.RedisError as exc:
            logger.warning("KV.PREFIX.LOOKUP %s failed: %s", namespace, exc)
            return False

    def get_or_prefill(self, prefix_ids: Sequence[int], namespace: Namespace | str | None = None) -> Any:
        """A ``DynamicCache`` holding ``prefix_ids``: restored from the server on a hit, else prefilled.

        Called once per request. The returned cache is new and owned by the caller. Never raises for
        server trouble; raises ValueError for an empty prefix.
        """
        ids = [int(t) for t in prefix_ids]
        if not ids:
            raise ValueError("prefix_ids is empty")
        ns = namespace if namespace is not None else self.namespace_for(ids)
        if self.stage2 is not None:
            return self.stage2.get_or_prefill(ids, str(ns))
        if self.client is None:
            self._stats.misses += 1
            return self._prefill(ids)
        t0 = time.perf_counter()
        try:
            hit = bool(self.client.kv_prefix_lookup(ns))
        except redis.RedisError as exc:
            logger.warning("KV.PREFIX.LOOKUP %s failed (%s); prefilling locally", ns, exc)
            self._stats.fallbacks += 1
            self._stats.misses += 1
            return self._prefill(ids)
        lookup_ms = (time.perf_counter() - t0) * 1e3
        if hit:
            try:
                cache = self._restore(ns, len(ids), lookup_ms)
                self._stats.hits += 1
                return cache
            except Exception as exc:  # any failed restore means "prefill locally"
                logger.warning("restoring prefix %s from pion-server failed (%s); prefilling locally", ns, exc)
                self._stats.fallbacks += 1
        self._stats.misses += 1
        cache, prefill_ms = self._timed_prefill(ids)
        self._store(ns, ids, cache, prefill_ms)
        return cache

    def store(self, prefix_ids: Sequence[int], cache: Any, namespace: Namespace | str | None = None,
              prefill_ms: float | None = None) -> bool:
        """Register and store a cache the caller already computed (its first ``len(prefix_ids)`` tokens).

        For a caller that prefilled prefix + suffix in one forward and wants to share the prefix part.
        Returns True when the server acknowledged every write; False (with a warning) otherwise.
        """
        ids = [int(t) for t in prefix_ids]
        if not ids:
            raise ValueError("prefix_ids is empty")
        if self.client is None:
            return False
        ns = namespace if namespace is not None else self.namespace_for(ids)
        return self._store(ns, ids, cache, prefill_ms)

    # ---- miss path --------------------------------------------------------------------------

    def _prefill(self, ids: list[int]) -> Any:
        return self._timed_prefill(ids)[0]

    def _timed_prefill(self, ids: list[int]) -> tuple[Any, float]:
        from pion.client.runtimes.transformers_runtime import prefill

        t0 = time.perf_counter()
        cache = prefill(self.model, ids)
        ms = (time.perf_counter() - t0) * 1e3
        self._stats.prefill_ms_total += ms
        return cache, ms

    def _store(self, ns: Namespace | str, ids: list[int], cache: Any, prefill_ms: float | None) -> bool:
        """Register the prefix and store every layer of K and V in one pipelined round trip."""
        assert self._transport is not None
        if self.hybrid is not None:
            return self.hybrid.store(self, self._transport, ns, ids, cache, prefill_ms)
        t0 = time.perf_counter()
        n = len(ids)

        rows, encoded = self._row_sources(cache, n)
        try:
            errors, nbytes, deferred = self._transport.store(ns, rows, blocks=block_table(ids, self.block_size),
                                                             prefill_ms=prefill_ms, encoded=encoded)
        except redis.RedisError as exc:
            errors, nbytes, deferred = [exc], 0, False
        if deferred:  # +DEFERRED: the server admits this prefix on its next sighting; keep it local
            self._stats.deferred += 1
            return False
        return account_store(self, ns, list(errors), nbytes, t0)

    # ---- hit path ---------------------------------------------------------------------------

    def _restore(self, ns: Namespace | str, n_tokens: int, lookup_ms: float) -> Any:
        """Fetch both sides in one round trip and build the cache; raises on any inconsistency."""
        from pion.client.runtimes.transformers_runtime import model_device

        assert self._transport is not None
        if self.hybrid is not None:
            return self.hybrid.restore(self, self._transport, ns, n_tokens, lookup_ms)
        timings = {"lookup": lookup_ms}
        t0 = time.perf_counter()
        k_reply, v_reply = self._transport.fetch(ns, n_tokens)
        t1 = time.perf_counter()
        timings["fetch"] = (t1 - t0) * 1e3
        restored = self._transport.decode(k_reply, v_reply, n_tokens)
        t2 = time.perf_counter()
        timings["decode"] = (t2 - t1) * 1e3
        cache = restored.to_cache(self.model.config, model_device(self.model),
                                  next(self.model.parameters()).dtype, materialize=self.materialize)
        timings["build"] = (time.perf_counter() - t2) * 1e3
        self._stats.fetch_ms_total += lookup_ms + (time.perf_counter() - t0) * 1e3
        self._stats.bytes_fetched += sum(len(d) for d in k_reply) + sum(len(d) for d in v_reply)
        self._stats.last_restore_ms = timings
        return cache

    # ---- counters and teardown --------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """hits, misses, hit_rate, fetch_ms_total, store_ms_total, prefill_ms_total, bytes, fallbacks."""
        s = self._stats
        lookups = s.hits + s.misses
        return {"hits": s.hits, "misses": s.misses, "hit_rate": s.hits / lookups if lookups else 0.0,
                "fetch_ms_total": s.fetch_ms_total, "store_ms_total": s.store_ms_total,
                "prefill_ms_total": s.prefill_ms_total, "bytes_fetched": s.bytes_fetched,
                "bytes_stored": s.bytes_stored, "fallbacks": s.fallbacks, "store_failures": s.store_failures,
                "deferred": s.deferred,
                "local_only": self.local_only, "last_restore_ms": dict(s.last_restore_ms),
                "cold_rehydrates_observed": self.cold_rehydrates_observed}

    @property
    def cold_rehydrates_observed(self) -> int:
        """Stage 2: queries that met -COLDMISS / STATUS_COLDMISS and were retried after KV.PREFIX.WARM."""
        return 0 if self.stage2 is None else self.stage2.counters.cold_rehydrates_observed

    def close(self) -> None:
        """Close the connection if this cache opened it."""
        if self.stage2 is not None:
            self.stage2.close()
        if self.client is not None and self._owns_client:
            self.client.close()
        self.client = None
        self._transport = None

    def __enter__(self) -> PionPromptCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
