"""The model side of pion-llm: restore the longest cached chain, prefill the rest, decode, store.

Everything here is synchronous and runs on pion-llm's single model worker thread, one request at a
time (``app.py`` owns the queue). A request's life:

1. ``Engine.start(plan, params)`` fetches the longest stored chain of ``plan``'s segments, builds a
   ``DynamicCache`` from it, credits the receipt once (``KV.PREFIX.LOOKUP <leaf> TOKENS n
   PREFILL_MS ms``) and returns a ``Generation``.
2. ``Generation.next_step()`` yields tokens; the first call prefills the uncached rest of the prompt
   and copies the new segments' rows out of the cache before decoding appends to it.
3. ``Generation.finish()`` stores the new segments and lets the budget evict leaves. It runs even
   when the client went away, since the prefill was already paid for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pion.client.runtimes.transformers_runtime import GenerationStep, generate_steps
from pion.llm.budget import LruLeafBudget
from pion.llm.defaults import GenerationDefaults
from pion.llm.segments import (
    ChainLink,
    ModelShape,
    PromptPlan,
    SegmentKV,
    cache_from_segments,
    chain_links,
    root_namespace,
    segment_from_cache,
)
from pion.client.stage2.layer import make_remote_cache
from pion.client.stage2.patch import select_pion_attention
from pion.llm.stage2 import RemoteChain, Stage2Restore
from pion.llm.stores import SegmentStore

logger = logging.getLogger("pion.llm")


@dataclass(frozen=True)
class RuntimeOps:
    """What the engine needs from a model runtime: transformers (``TRANSFORMERS_OPS``, the default)
    or MLX (``pion.llm.mlx_ops.MLX_OPS``, ``pion-llm --runtime mlx``)."""

    shape: Callable[[Any], ModelShape]
    context_tokens: Callable[[Any], int]
    cache_from_segments: Callable[[Any, Sequence[SegmentKV]], Any]
    segment_from_cache: Callable[[Any, int, int], SegmentKV]
    generate_steps: Callable[..., Iterator[GenerationStep]]
    # --stage2: route the model's attention through Pion's, and build a cache of ``prefix_len``
    # remote tokens whose prefix part is served by a ``pion.llm.stage2.ChainLane``
    select_stage2: Callable[[Any], None] = select_pion_attention
    remote_cache: Callable[[Any, int, Any], Any] = lambda model, prefix_len, lane: make_remote_cache(
        model.config, prefix_len, lane)


TRANSFORMERS_OPS = RuntimeOps(
    shape=ModelShape.of,
    context_tokens=lambda model: int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30),
    cache_from_segments=cache_from_segments, segment_from_cache=segment_from_cache,
    generate_steps=generate_steps)


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings of one request (already validated)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None


class Generation:
    """One request's decoding state; driven step by step by the model worker."""

    def __init__(self, engine: Engine, plan: PromptPlan, links: list[ChainLink], restored: list[SegmentKV],
                 params: SamplingParams, started: float, remote: RemoteChain | None = None) -> None:
        self.engine = engine
        self.plan = plan
        self.links = links
        self.cached_tokens = remote.n_tokens if remote is not None else sum(s.n_tokens for s in restored)
        self._local_offset = 0 if remote is None else remote.n_tokens  # a stage-2 cache holds local tokens only
        self.prompt_tokens = plan.n_tokens
        self.params = params
        self.started = started
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self.first_token_ms: float | None = None
        self._new_rows: list[tuple[ChainLink, SegmentKV]] = []
        self._restored = remote.n_links if remote is not None else len(restored)
        cache = (engine.ops.remote_cache(engine.model, remote.n_tokens, remote.lane) if remote is not None
                 else engine.ops.cache_from_segments(engine.model, restored))
        self._cache = cache
        self.restore_ms = (time.perf_counter() - started) * 1000.0  # fetch + decode + cache build
        self._steps: Generator[GenerationStep, None, None] = engine.ops.generate_steps(  # type: ignore[assignment]
            engine.model, engine.tokenizer, plan.ids[self.cached_tokens:], prompt_cache=cache,
            max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p,
            stop=list(params.stop) or None, seed=params.seed)

    def next_step(self) -> GenerationStep | None:
        """The next token, or None when generation has ended (``finish_reason`` is then set)."""
        if self.finish_reason is not None:
            return None
        first = self.completion_tokens == 0
        t0 = time.perf_counter()
        step = next(self._steps, None)
        if first:
            self.first_token_ms = (time.perf_counter() - t0) * 1000.0
            self._capture_new_segments(self.first_token_ms)
        if step is None:
            self.finish_reason = "stop"
            return None
        self.completion_tokens += 1
        if self.completion_tokens >= self.params.max_tokens:
            self.finish_reason = "length"
        return step

    def _capture_new_segments(self, prefill_ms: float) -> None:
        """Copy the rows of segments this request prefilled, before decoding appends to the cache."""
        cache = self._cache
        new_links = self.links[self._restored:]
        if not new_links or not self.engine.reuse_enabled:
            return
        uncached = self.plan.n_tokens - self.cached_tokens
        for link in new_links:
            start = link.start - self._local_offset
            rows = self.engine.ops.segment_from_cache(cache, start, start + link.n_tokens)
            rows.prefill_ms = prefill_ms * link.n_tokens / max(1, uncached)
            self._new_rows.append((link, rows))

    def finish(self) -> None:
        """Store the segments this request prefilled and apply the byte budget."""
        self._steps.close()
        logger.info("request: %d prompt tokens, %d restored (%d segments) in %.1f ms, %d prefilled + first token "
                    "in %.1f ms, %d generated", self.prompt_tokens, self.cached_tokens, self._restored,
                    self.restore_ms, self.prompt_tokens - self.cached_tokens, self.first_token_ms or 0.0,
                    self.completion_tokens)
        if self._new_rows:
            self.engine.store_segments(self.links[:self._restored], self._new_rows)
        self._new_rows = []


class Engine:
    """The loaded model plus the segment store; used from one worker thread only."""

    def __init__(self, model: Any, tokenizer: Any, model_name: str, store: SegmentStore | None,
                 vquant: str = "fp16", budget_bytes: int | None = None,
                 generation_defaults: GenerationDefaults | None = None, stage2: Stage2Restore | None = None,
                 ops: RuntimeOps = TRANSFORMERS_OPS) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.store = store
        self.ops = ops
        self.shape = ops.shape(model)
        self.root = root_namespace(self.shape, vquant)
        self.budget = LruLeafBudget(budget_bytes)
        self.context_tokens = ops.context_tokens(model)
        self.prefill_ms_by_ns: dict[str, float] = {}
        # What a request that omits temperature / top_p gets (pion.llm.defaults).
        self.generation_defaults = generation_defaults or GenerationDefaults()
        self.stage2 = stage2  # --stage2: restored segments are attended in pion-server
        if stage2 is not None:
            ops.select_stage2(model)

    @property
    def reuse_enabled(self) -> bool:
        return self.store is not None

    def start(self, plan: PromptPlan, params: SamplingParams) -> Generation:
        """Restore the longest cached prefix of ``plan`` and set up decoding."""
        started = time.perf_counter()
        links = chain_links(self.root, plan) if self.store is not None else []
        restored: list[SegmentKV] = []
        if self.stage2 is not None and self.store is not None and links:
            remote = self.stage2.restore(links)
            n_links = remote.n_links if remote is not None else 0
            self.store.credit(links[:n_links] or links[:1], remote.n_tokens if remote is not None else 0, None)
            if remote is not None:
                self.budget.touch_chain([(link.namespace, link.parent, self._segment_bytes(link))
                                         for link in links[:n_links]])
            return Generation(self, plan, links, [], params, started, remote)
        if self.store is not None and links:
            restored = self.store.fetch_chain(links)
            n_restored = sum(s.n_tokens for s in restored)
            known = [self.prefill_ms_by_ns.get(link.namespace) for link in links[:len(restored)]]
            prefill_ms = sum(k for k in known if k is not None) if known and None not in known else None
            self.store.credit(links[:len(restored)] or links[:1], n_restored, prefill_ms)
            if restored:
                self.budget.touch_chain([(link.namespace, link.parent, self._segment_bytes(link))
                                         for link in links[:len(restored)]])
        return Generation(self, plan, links, restored, params, started)

    def _segment_bytes(self, link: ChainLink) -> int:
        """What the store really holds for this segment (the budget's unit; see ``SegmentStore.stored_bytes``)."""
        assert self.store is not None  # only called with a store
        return self.store.stored_bytes(self.shape, link.n_tokens)

    def store_segments(self, restored: list[ChainLink], new_rows: list[tuple[ChainLink, SegmentKV]]) -> None:
        """Store newly prefilled segments (in chain order), then evict leaves over the budget."""
        if self.store is None:
            return
        stored: list[ChainLink] = []
        for link, rows in new_rows:
            if not self.store.store(link, rows):
                break
            stored.append(link)
            if rows.prefill_ms is not None:
                self.prefill_ms_by_ns[link.namespace] = rows.prefill_ms
        self.budget.touch_chain([(link.namespace, link.parent, self._segment_bytes(link))
                                 for link in [*restored, *stored]])
        victims = self.budget.victims()
        if victims:
            dropped = self.store.drop(victims)
            for ns in victims:
                self.prefill_ms_by_ns.pop(ns, None)
            logger.info("budget: dropped %d leaf segment(s) (%d held), %d bytes held", dropped,
                        len(self.budget), self.budget.total_bytes)
