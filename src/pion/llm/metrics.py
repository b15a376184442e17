"""Prometheus metrics of one pion-llm app, on a registry of its own (no process-global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class LlmMetrics:
    """Requests, time to first token, prompt/cached/completion tokens and queue depth."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("pion_llm_requests", "HTTP requests by endpoint and status",
                                ["endpoint", "status"], registry=self.registry)
        self.ttft = Histogram("pion_llm_ttft_seconds", "Time from request arrival to first token",
                              buckets=TTFT_BUCKETS_S, registry=self.registry)
        self.prompt_tokens = Counter("pion_llm_prompt_tokens", "Prompt tokens", registry=self.registry)
        self.cached_tokens = Counter("pion_llm_cached_tokens", "Prompt tokens restored instead of prefilled",
                                     registry=self.registry)
        self.completion_tokens = Counter("pion_llm_completion_tokens", "Generated tokens", registry=self.registry)
        self.queue_depth = Gauge("pion_llm_queue_depth", "Requests waiting for the model", registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
