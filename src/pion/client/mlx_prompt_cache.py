"""PionPromptCache for mlx-lm: the transformers cache's API over mlx-lm cache objects.

Same roles and wire traffic as ``pion.client.prompt_cache`` (read that docstring first): one
``KV.PREFIX.LOOKUP``, then on a hit one pipelined round trip of two ``V.MFETCH`` through the one
``PrefixTransport``; on a miss a local prefill and one pipelined register + ``V.STOREBATCH`` per
layer and side. What differs is the cache object:

* ``get_or_prefill`` returns a list with one mlx-lm cache object per layer, ready for
  ``mlx_lm.generate(..., prompt_cache=cache)``: ``KVCache`` for float formats,
  ``QuantizedKVCache(group_size=32, bits=4)`` for ``mlx4g32`` (``pion.client.runtimes.mlx_kv``).
* A miss in ``mlx4g32`` prefills into that ``QuantizedKVCache`` and stores its bytes raw, so a
  miss and a hit hold the same bits and generate the same tokens.
* Sliding-window models (``RotatingKVCache`` layers): only a prefix that fits the smallest window
  is cached (``mlx_kv`` says why). A longer one is prefilled locally with no server traffic at all
  and counted in ``stats()["window_refusals"]``; ``store`` of one returns False.
* Namespaces come from ``mlx_runtime.mlx_fingerprint``: equal to the transformers runtime's for
  the same weights, config, tokenizer, RoPE and dtype, so prefixes are shared across runtimes
  exactly when that is valid.

The request path (``get_or_prefill``, ``lookup``, ``store``, ``stats``, ``close``) is inherited from
the transformers ``PionPromptCache``; this class provides the runtime parts it calls
(``_describe_model``, ``_make_stage2``, ``_timed_prefill``, ``_row_sources``, ``_restore``). Failures behave
the same: server trouble logs a warning and prefills locally.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from pion.client.block_hashes import DEFAULT_BLOCK_SIZE
from pion.client.connection import DEFAULT_HOST, DEFAULT_PORT, PionClient
from pion.client.prefix_transport import EncodedRowSource, RestoreDtype, RowSource, Side
from pion.client.prompt_cache import PionPromptCache as TransformersPromptCache
from pion.client.runtimes import mlx_hybrid, mlx_kv
from pion.client.runtimes.mlx_runtime import mlx_fingerprint, model_dtype, prefill
from pion.client.kv_shape import KvShape
from pion.common.ids import Namespace

logger = logging.getLogger(__name__)
__all__ = ["PionPromptCache"]


class PionPromptCache(TransformersPromptCache):
    """Prefix K/V cache for an mlx-lm model, shared through pion-server.

    Args: as the transformers ``PionPromptCache`` (``materialize`` has no MLX meaning and is not
    taken). ``model`` is an mlx-lm model (``mlx_lm.load`` or ``pion.load_model(runtime="mlx")``);
    ``vquant="mlx4g32"`` restores into ``QuantizedKVCache(32, 4)``, the other formats into ``KVCache``
    (also mlx4g32 with ``restore_dtype="f16"``, which has the server decode). ``stage2=True``
    returns stage-2 cache lists (``pion.client.runtimes.mlx_stage2``).
    """

    def __init__(self, model: Any, vquant: str = "fp16", boundary_protect: int = 0, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT, password: str | None = None, client: PionClient | None = None, *,
                 tokenizer: Any | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 restore_dtype: RestoreDtype = "auto", stage2: bool = False, stage2_lane: str = "auto") -> None:
        super().__init__(model, vquant, boundary_protect, host, port, password, client, tokenizer=tokenizer,
                         block_size=block_size, restore_dtype=restore_dtype, stage2=stage2, stage2_lane=stage2_lane)
        # A layer is quantized in the cache only when both sides are mlx4g32 and travel raw.
        raw = restore_dtype != "f16"
        self._cache_formats = [mlx_kv.MLX4_FORMAT if raw and k == v == mlx_kv.MLX4_FORMAT else "float"
                               for k, v in zip(self.formats.k, self.formats.v, strict=True)]
        if self.hybrid is not None:  # formats cover the attention layers only; the cache has every layer
            self._cache_formats = self.hybrid.model_formats(self._cache_formats)
        self.windows = mlx_kv.layer_windows(model)
        self.window = mlx_kv.prefix_window(self.windows)  # the longest cacheable prefix (None: unbounded)
        self._window_refusals = 0
        if self.stage2 is not None and (self.window is not None or self.hybrid is not None):
            self.close()
            raise ValueError("stage2 is not supported for sliding-window models (RotatingKVCache layers) "
                             "or recurrent/hybrid models (ArraysCache layers)")

    _numpy_rows = True  # row sources get numpy dtypes: nothing on the MLX path imports torch

    def _describe_model(self, model: Any, tokenizer: Any | None) -> tuple[Any, KvShape, tuple[str, ...]]:
        hybrid = mlx_hybrid.hybrid_transport_for(model)  # ArraysCache layers: pion.client.runtimes.mlx_hybrid
        shape = hybrid.kv_shape if hybrid is not None else mlx_kv.kv_shape(model)
        return hybrid, shape, mlx_fingerprint(model, tokenizer)

    def _make_stage2(self, lane: str) -> Any:
        from pion.client.runtimes.mlx_stage2 import MlxStage2Support

        return MlxStage2Support(self, lane)

    def new_cache(self) -> list[Any]:
        """An empty cache list of the kind a hit restores (QuantizedKVCache layers for mlx4g32)."""
        return mlx_kv.make_cache(self.model, self._cache_formats)

    def _fits_window(self, n_tokens: int) -> bool:
        """False (and counted) for a prefix longer than the model's smallest sliding window."""
        if self.window is None or n_tokens <= self.window:
            return True
        self._window_refusals += 1
        logger.info("prefix of %d tokens exceeds the sliding window of %d tokens; not cached", n_tokens, self.window)
        return False

    def get_or_prefill(self, prefix_ids: Any, namespace: Namespace | str | None = None) -> Any:
        """As the transformers cache's; a prefix longer than the sliding window is prefilled locally, uncached."""
        ids = [int(t) for t in prefix_ids]
        if ids and not self._fits_window(len(ids)):
            self._stats.misses += 1
            return self._prefill(ids)
        return super().get_or_prefill(ids, namespace)

    def store(self, prefix_ids: Any, cache: Any, namespace: Namespace | str | None = None,
              prefill_ms: float | None = None) -> bool:
        """As the transformers cache's; False for a prefix longer than the sliding window, or a ``cache``
        whose sliding-window layers have rotated past the prefix (prefix + suffix longer than the window)."""
        ids = [int(t) for t in prefix_ids]
        if ids and not self._fits_window(len(ids)):
            return False
        if mlx_kv.has_rotated(cache):
            self._window_refusals += 1
            logger.info("cache has rotated past its sliding window; prefix of %d tokens not stored", len(ids))
            return False
        return super().store(ids, cache, namespace, prefill_ms)

    # ---- miss path --------------------------------------------------------------------------

    def _timed_prefill(self, ids: list[int]) -> tuple[list[Any], float]:
        t0 = time.perf_counter()
        cache = prefill(self.model, ids, self.new_cache())
        mlx_kv.round_params_to_stored(cache)  # the miss keeps what a hit restores (fp16 scales/biases)
        ms = (time.perf_counter() - t0) * 1e3
        self._stats.prefill_ms_total += ms
        return cache, ms

    def _row_sources(self, cache: Any, n_tokens: int) -> tuple[RowSource, EncodedRowSource | None]:
        """Float rows of any layer, and a ``QuantizedKVCache(32, 4)`` layer's own bytes for mlx4g32 (sent raw)."""
        formats = self.formats

        def rows(side: Side, layer: int, dtype: Any) -> np.ndarray:
            return mlx_kv.float_rows(cache[layer], side, n_tokens, mlx_kv.wire_np_dtype(dtype))

        def encoded(side: Side, layer: int) -> np.ndarray | None:
            if formats.of(side)[layer] == mlx_kv.MLX4_FORMAT and mlx_kv.is_mlx4_cache(cache[layer]):
                return mlx_kv.mlx4_rows(cache[layer], side, n_tokens)
            return None
        return rows, encoded

    # ---- hit path ---------------------------------------------------------------------------

    def _restore(self, ns: Namespace | str, n_tokens: int, lookup_ms: float) -> list[Any]:
        """Fetch both sides in one round trip and build mlx-lm cache objects; raises on any inconsistency."""
        assert self._transport is not None
        if self.hybrid is not None:
            return self.hybrid.restore(self, self._transport, ns, n_tokens, lookup_ms)  # type: ignore[no-any-return]
        timings = {"lookup": lookup_ms}
        t0 = time.perf_counter()
        k_reply, v_reply = self._transport.fetch(ns, n_tokens)
        t1 = time.perf_counter()
        timings["fetch"] = (t1 - t0) * 1e3
        k_formats = [f if self._transport.k_wire == "raw" else "fp16" for f in self.formats.k]
        v_formats = [f if self._transport.v_wire == "raw" else "fp16" for f in self.formats.v]
        cache = mlx_kv.build_cache(self.shape, n_tokens, k_formats, v_formats, k_reply, v_reply,
                                   model_dtype(self.model), self.windows)
        timings["build"] = (time.perf_counter() - t1) * 1e3
        self._stats.fetch_ms_total += lookup_ms + (time.perf_counter() - t0) * 1e3
        self._stats.bytes_fetched += sum(len(d) for d in k_reply) + sum(len(d) for d in v_reply)
        self._stats.last_restore_ms = timings
        return cache

    def stats(self) -> dict[str, Any]:
        """The transformers cache's counters plus the stage-2 lane counters."""
        out = super().stats()
        out["window_refusals"] = self._window_refusals
        if self.stage2 is not None:
            out.update(self.stage2.stats())
        return out
