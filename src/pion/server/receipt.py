"""The value receipt: what the caches did for the client, as counters (PION.STATS, INFO # Pion).

One ``Receipt`` per worker, ``ServerState.receipt``. Recording
is a counter increment on already-slow-path commands; formatting happens only
when PION.STATS or INFO asks.

Two kinds of saved prefill time are kept apart on purpose:
  measured   a hit on a prefix registered with PREFILL_MS (or a LOOKUP naming
             PREFILL_MS) is credited exactly that time;
  estimated  any other hit is credited tokens x ``prefill_us_per_token``.
``prefill_seconds_avoided`` is their sum.

moe_hits / moe_misses are part of the 16-field contract (docs/protocol.md) and are always 0:
this build has no MoE expert tier, so nothing counts them.
semantic_* and vector_queries are fed by the semantic-cache / vector families
through ``record_semantic`` and ``record_vector_query``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

# The 16 PION.STATS fields, in reply order.
FIELDS = (
    "kvprefix_hits", "kvprefix_misses", "kvprefix_tokens_served", "kvprefix_bytes_served",
    "prefill_seconds_avoided", "prefill_seconds_avoided_measured", "kvprefix_hits_measured",
    "semantic_hits", "semantic_misses", "moe_hits", "moe_misses", "vector_queries",
    "uptime_seconds", "kvprefix_hit_rate", "semantic_hit_rate", "prefill_seconds_avoided_estimated",
)


class ReceiptSection(Protocol):
    """More PION.STATS fields, added after the 16 by an optional part (the cold tier)."""

    def fields(self) -> dict[str, int | float]: ...

    def reset(self) -> None: ...


class Receipt:
    """Per-worker counters behind PION.STATS."""

    def __init__(self, prefill_us_per_token: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.prefill_us_per_token = prefill_us_per_token
        self._clock = clock
        self._started = clock()
        # Extra field groups appended after the 16 (the cold tier's, with --cold-tier): each has
        # fields() -> {name: value} and reset().
        self.sections: list[ReceiptSection] = []
        self.reset()

    def reset(self) -> None:
        """Zero every counter; uptime is not a counter and keeps running."""
        self.kvprefix_hits = 0
        self.kvprefix_misses = 0
        self.kvprefix_tokens_served = 0
        self.kvprefix_bytes_served = 0
        self.kvprefix_hits_measured = 0
        self.prefill_seconds_measured = 0.0
        self.prefill_seconds_estimated = 0.0
        self.semantic_hits = 0
        self.semantic_misses = 0
        self.vector_queries = 0
        self.admission_deferred = 0  # KV.PREFIX.REGISTER answered +DEFERRED (--admission 2hit)
        self.admission_admitted = 0  # registrations admitted (under 2hit: on their second sight)
        for section in getattr(self, "sections", ()):
            section.reset()

    def record_prefix_lookup(self, hit: bool, tokens: int = 0, measured_ms: float | None = None) -> None:
        """One KV.PREFIX.LOOKUP answer. A hit credits ``measured_ms`` if known, else the token estimate."""
        if not hit:
            self.kvprefix_misses += 1
            return
        self.kvprefix_hits += 1
        self.kvprefix_tokens_served += tokens
        if measured_ms is not None:
            self.kvprefix_hits_measured += 1
            self.prefill_seconds_measured += measured_ms / 1000.0
        else:
            self.prefill_seconds_estimated += tokens * self.prefill_us_per_token / 1e6

    def record_bytes_served(self, n_bytes: int) -> None:
        """Payload bytes delivered by V.FETCH / V.MFETCH."""
        self.kvprefix_bytes_served += n_bytes

    def record_semantic(self, hit: bool) -> None:
        """One semantic-cache GET (AI.SEMANTIC_CACHE GET and every other cache_get caller)."""
        if hit:
            self.semantic_hits += 1
        else:
            self.semantic_misses += 1

    def record_admission(self, deferred: bool) -> None:
        """One valid KV.PREFIX.REGISTER: deferred (+DEFERRED) or admitted (+OK)."""
        if deferred:
            self.admission_deferred += 1
        else:
            self.admission_admitted += 1

    def admission_snapshot(self) -> dict[str, int]:
        """The admission counters (PION.STATS adds them to the 16 fields under --admission 2hit)."""
        return {"admission_deferred": self.admission_deferred, "admission_admitted": self.admission_admitted}

    def record_vector_query(self) -> None:
        """One FT.SEARCH / FT.HYBRID answered."""
        self.vector_queries += 1

    @property
    def uptime_seconds(self) -> int:
        return int(self._clock() - self._started)

    def snapshot(self) -> dict[str, int | float]:
        """The 16 fields, in ``FIELDS`` order."""
        lookups = self.kvprefix_hits + self.kvprefix_misses
        semantic = self.semantic_hits + self.semantic_misses
        values: dict[str, int | float] = {
            "kvprefix_hits": self.kvprefix_hits,
            "kvprefix_misses": self.kvprefix_misses,
            "kvprefix_tokens_served": self.kvprefix_tokens_served,
            "kvprefix_bytes_served": self.kvprefix_bytes_served,
            "prefill_seconds_avoided": self.prefill_seconds_measured + self.prefill_seconds_estimated,
            "prefill_seconds_avoided_measured": self.prefill_seconds_measured,
            "kvprefix_hits_measured": self.kvprefix_hits_measured,
            "semantic_hits": self.semantic_hits,
            "semantic_misses": self.semantic_misses,
            "moe_hits": 0,  # the 16-field contract reserves these; this build has no MoE expert tier
            "moe_misses": 0,
            "vector_queries": self.vector_queries,
            "uptime_seconds": self.uptime_seconds,
            "kvprefix_hit_rate": self.kvprefix_hits / lookups if lookups else 0.0,
            "semantic_hit_rate": self.semantic_hits / semantic if semantic else 0.0,
            "prefill_seconds_avoided_estimated": self.prefill_seconds_estimated,
        }
        fields = {name: values[name] for name in FIELDS}
        for section in self.sections:
            fields.update(section.fields())
        return fields

