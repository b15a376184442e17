"""Counters behind GET /v1/stats (the original design's schema) and GET /metrics (Prometheus).

Each app gets its own Prometheus registry so several proxies (tests) can share a process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from pion.proxy.verifier import REASONS, Verdict

SIMILARITY_BUCKETS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.925, 0.95, 0.975, 0.99, 1.0)


@dataclass
class ServeStats:
    """Request outcomes since start."""

    total_requests: int = 0
    l1_cache_hits: int = 0
    l3_direct: int = 0
    l3_composite: int = 0
    l3b_fragment: int = 0
    full_inference: int = 0
    errors: int = 0
    guard_rejections: int = 0
    # Similarity hits by what the verifier decided: served, or refused and why.
    verdicts_served: int = 0
    refused: dict[str, dict[str, int]] = field(default_factory=dict)
    rag_injections: int = 0
    latency_ms_sum: float = 0.0
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.m_requests = Counter("pion_serve_requests", "Chat completion requests by outcome",
                                  ["source"], registry=r)
        self.m_hits = Counter("pion_serve_cache_hits", "Requests served from a cache layer", ["layer"], registry=r)
        self.m_misses = Counter("pion_serve_cache_misses", "Cache lookups that found nothing servable",
                                registry=r)
        self.m_guard = Counter("pion_serve_guard_rejections", "Similarity hits refused by the guard",
                               registry=r)
        self.m_verdicts = Counter("pion_serve_l1_verdicts",
                                  "Similarity hits by verdict: served, refused_by_guard (word rules / hard "
                                  "checks) or refused_by_verifier (word alignment), with the reason",
                                  ["outcome", "reason"], registry=r)
        self.m_backend = Histogram("pion_serve_backend_latency_seconds", "Backend call latency",
                                   ["backend"], registry=r)
        self.m_lookups = Counter("pion_serve_cache_lookups", "L1 lookups that reached pion-server",
                                 registry=r)
        # Observed for every lookup whose scope held an entry, hit or miss: the server
        # reports the best similarity below the threshold too (GET ... WITHBEST). Lookups
        # in an empty scope have no similarity: lookups_total - this count.
        self.m_similarity = Histogram("pion_serve_lookup_similarity",
                                      "Best similarity of each L1 lookup (hit or miss) in a non-empty scope",
                                      buckets=SIMILARITY_BUCKETS, registry=r)

    def record(self, source: str, latency_ms: float) -> None:
        """One finished request: source is l1_cache | l3_direct | l3_composite | l3b_fragment
        | full_inference | error."""
        self.total_requests += 1
        self.latency_ms_sum += latency_ms
        if source == "l1_cache":
            self.l1_cache_hits += 1
            self.m_hits.labels(layer="l1").inc()
        elif source in ("l3_direct", "l3_composite", "l3b_fragment"):
            setattr(self, source, getattr(self, source) + 1)
            self.m_hits.labels(layer=source).inc()
        elif source == "full_inference":
            self.full_inference += 1
        else:
            self.errors += 1
        self.m_requests.labels(source=source).inc()

    def record_verdict(self, verdict: Verdict) -> None:
        """One similarity hit checked before serving: served, or refused by a stage and why."""
        if verdict.ok:
            self.verdicts_served += 1
            self.m_verdicts.labels(outcome="served", reason="").inc()
            return
        self.guard_rejections += 1
        self.m_guard.inc()
        outcome = f"refused_by_{verdict.stage}"
        counts = self.refused.setdefault(outcome, dict.fromkeys(REASONS, 0))
        counts[verdict.reason] = counts.get(verdict.reason, 0) + 1
        self.m_verdicts.labels(outcome=outcome, reason=verdict.reason).inc()

    def verdicts(self) -> dict[str, Any]:
        """/v1/stats ``l1_verdicts``: hits served, and refusals per stage and reason."""
        return {"served": self.verdicts_served,
                **{f"refused_by_{stage}": dict(self.refused.get(f"refused_by_{stage}", dict.fromkeys(REASONS, 0)))
                   for stage in ("guard", "verifier")}}

    def prometheus(self) -> bytes:
        return generate_latest(self.registry)

    def schema(self, *, backend: str, model: str | None, cache_enabled: bool,
               embedder: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The /v1/stats document; ``extra`` fills the keys of optional layers
        (distill_enabled, l3_concepts, l3_fragments, intent_router, rag_*, mlx_gpu, v_store).

        l3_synthesis = l3_direct + l3_composite + L3b fragment hits (l3_fragments.hits): every
        answer the distill layers served instead of the backend.
        """
        total = self.total_requests
        rate = (lambda n: round(n / total, 4) if total else 0.0)
        l3 = self.l3_direct + self.l3_composite + self.l3b_fragment
        doc = {
            "total_requests": total,
            "l1_cache_hits": self.l1_cache_hits,
            "l3_synthesis": l3, "l3_direct": self.l3_direct, "l3_composite": self.l3_composite,
            "full_inference": self.full_inference,
            "l1_hit_rate": rate(self.l1_cache_hits),
            "l3_synthesis_rate": rate(l3),
            "full_inference_rate": rate(self.full_inference),
            "cost_savings_pct": round((rate(self.l1_cache_hits) + rate(l3)) * 100, 2),
            "rag_injections": self.rag_injections,
            "avg_latency_ms": round(self.latency_ms_sum / total, 3) if total else 0.0,
            "backend": backend,
            "model": model,
            "cache_enabled": cache_enabled,
            "distill_enabled": False,
            "rag_index": None,
            "embedder": embedder,
            "l3_concepts": None,
            "l3_fragments": None,
            "intent_router": None,
            "mlx_gpu": None,
            "v_store": None,
            "l1_verdicts": self.verdicts(),
        }
        return doc | (extra or {})
