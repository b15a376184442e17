"""Intent routing (``--route``): pick a cheap, mid or top model tier for each backend call.

The classifier is the original design's, step by step:
  1. embed the query with the proxy's embedder (the same vector space as L1);
  2. cosine to two centroids, each the normalised mean of 20 seed queries; diff = simple - complex;
  3-5. diff > +margin -> simple, diff < -margin -> complex, else medium;
  6-9. heuristics override: code block / ``def f(`` / ``class X:`` / ``SELECT .. FROM`` /
     ``Traceback`` -> complex; complex with <= 6 whitespace tokens -> medium; simple with
     >= 60 tokens -> medium.
No embedding (embedder down or ``--embed-backend none``) -> medium, counted as unclassified.

``confidence`` (the original design leaves it open): the cosine between the query and the centroid of the
tier it was sent to (for medium, the nearer centroid); 1.0 when the code heuristic decided,
0.0 when there was no embedding.

Routing runs only on a real backend call, after L1 / L3 / RAG (``completions.py`` calls
``RouteTable.backend_for`` only on a miss). Cost: each routed completion's real
``usage.total_tokens`` x the tier's ``cost_per_mtok`` / 1e6 (a stream without usage is
estimated at 4 characters per token and counted in ``usage_estimated``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from pion.common.errors import ConfigError
from pion.proxy.backends import make_backend
from pion.proxy.backends.base import Backend
from pion.proxy.learned_router import LearnedRouteModel

TIERS = ("simple", "medium", "complex")
DEFAULT_MARGIN = 0.05
SHORT_QUERY_TOKENS = 6
LONG_QUERY_TOKENS = 60

SIMPLE_SEEDS = (
    "What is the capital of France?",
    "What time is it in Tokyo?",
    "How many days are in a leap year?",
    "Who wrote Romeo and Juliet?",
    "What is the boiling point of water?",
    "Translate 'thank you' into Spanish.",
    "What does CPU stand for?",
    "How do I reset my password?",
    "What are your opening hours?",
    "Define photosynthesis in one sentence.",
    "What is 15 plus 27?",
    "Spell the word necessary.",
    "Who is the president of the United States?",
    "What is the plural of mouse?",
    "Convert 10 miles to kilometres.",
    "What color is the sky?",
    "When was the Eiffel Tower built?",
    "What is the largest planet in our solar system?",
    "Give me a synonym for happy.",
    "Where is the nearest train station?",
)

COMPLEX_SEEDS = (
    "Design a distributed rate limiter for a multi-region API and explain the trade-offs.",
    "Prove that there are infinitely many prime numbers.",
    "Write a Python function that parses a CSV file and handles quoted fields with newlines.",
    "Compare the economic policies of Keynesian and Austrian schools and their effect on inflation.",
    "Explain why this recursive algorithm has exponential time complexity and how to optimise it.",
    "Analyse the causes of the 2008 financial crisis and evaluate the regulatory response.",
    "Refactor this class to use dependency injection and write unit tests for it.",
    "Derive the closed-form solution of ordinary least squares regression.",
    "Debug why my Kubernetes pods keep restarting with exit code 137 under load.",
    "Write a SQL query that finds the top three customers by revenue in each region per quarter.",
    "Plan a migration of a monolith to microservices with zero downtime.",
    "Explain the differences between consistency models in distributed databases with examples.",
    "Solve this step by step: a train leaves at 3 pm at 60 mph and another follows at 80 mph; when does it catch up?",
    "Critically evaluate the ethical implications of autonomous weapons systems.",
    "Implement a thread-safe LRU cache in C++ with O(1) operations.",
    "Summarise the key arguments of this research paper and identify its methodological weaknesses.",
    "How would you architect a real-time recommendation system for millions of users?",
    "Explain how transformers use self-attention and why it scales quadratically with sequence length.",
    "Write a legal analysis of whether this contract clause is enforceable under EU law.",
    "Optimise this slow PostgreSQL query plan that uses nested loops over large tables.",
)

# Step 7 of the classifier: code, SQL, stack traces.
_CODE = re.compile(
    r"```|\bdef\s+\w+\s*\(|\bclass\s+\w+\s*[:(]|\bselect\b[\s\S]+?\bfrom\b|Traceback \(most recent call last\)"
    r"|\bTraceback\b|\bfunction\s+\w+\s*\(|#include\s*<",
    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """The tier a query goes to, and why."""

    tier: str
    confidence: float
    heuristic_boost: str = ""
    classified: bool = True


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


@dataclass(frozen=True)
class CentroidClassifier:
    """Steps 2-9 on an already computed query vector (pure, so the offline eval uses it too)."""

    simple_centroid: np.ndarray
    complex_centroid: np.ndarray
    margin: float = DEFAULT_MARGIN

    @classmethod
    def from_seed_vectors(cls, simple: np.ndarray, complex_: np.ndarray,
                          margin: float = DEFAULT_MARGIN) -> CentroidClassifier:
        return cls(_unit(np.asarray(simple, np.float32).mean(axis=0)),
                   _unit(np.asarray(complex_, np.float32).mean(axis=0)), margin)

    def diffs(self, vectors: np.ndarray) -> np.ndarray:
        """simple - complex cosine per row of ``vectors`` (rows of unit length)."""
        return vectors @ self.simple_centroid - vectors @ self.complex_centroid

    def classify(self, text: str, vector: np.ndarray | None) -> RouteDecision:
        if _CODE.search(text):
            return RouteDecision("complex", 1.0, "code")
        if vector is None:
            return RouteDecision("medium", 0.0, "no_embedding", classified=False)
        v = _unit(np.asarray(vector, np.float32))
        s, c = float(v @ self.simple_centroid), float(v @ self.complex_centroid)
        tier = tier_of(s - c, self.margin)
        confidence = round(s if tier == "simple" else c if tier == "complex" else max(s, c), 4)
        return with_length_heuristics(text, tier, confidence)

    @property
    def dim(self) -> int:
        return len(self.simple_centroid)


def tier_of(diff: float, margin: float) -> str:
    """Steps 3-5: diff (positive = simple) against the margin."""
    return "simple" if diff > margin else "complex" if diff < -margin else "medium"


def with_length_heuristics(text: str, tier: str, confidence: float) -> RouteDecision:
    """Steps 8-9: a short "complex" query and a long "simple" one go to medium."""
    n_tokens = len(text.split())
    if tier == "complex" and n_tokens <= SHORT_QUERY_TOKENS:
        return RouteDecision("medium", confidence, "short_query")
    if tier == "simple" and n_tokens >= LONG_QUERY_TOKENS:
        return RouteDecision("medium", confidence, "long_query")
    return RouteDecision(tier, confidence)


@dataclass(frozen=True)
class LearnedClassifier:
    """``--route-classifier``: the same steps with a learned score in place of the centroids.

    diff = threshold - score (score: the model's probability that the query needs the strong
    tier) against the model file's margin (score units; ``--route-margin`` is the centroids'
    cosine margin and would be far too wide here: measured in docs/benchmarks.md), so the
    code / short / long heuristics and the no-embedding fallback act exactly as for the
    centroids. Confidence: the score for complex, 1 - score for simple, the larger of the two
    for medium.
    """

    model: LearnedRouteModel

    @property
    def dim(self) -> int:
        return self.model.dim

    def classify(self, text: str, vector: np.ndarray | None) -> RouteDecision:
        if _CODE.search(text):
            return RouteDecision("complex", 1.0, "code")
        if vector is None:
            return RouteDecision("medium", 0.0, "no_embedding", classified=False)
        score = float(self.model.scores(np.asarray(vector, np.float32)[None, :], [text])[0])
        tier = tier_of(self.model.threshold - score, self.model.margin)
        confidence = round(score if tier == "complex" else 1.0 - score if tier == "simple"
                           else max(score, 1.0 - score), 4)
        return with_length_heuristics(text, tier, confidence)


@dataclass(frozen=True, slots=True)
class Tier:
    """One row of the routing table."""

    backend: str
    model: str
    cost_per_mtok: float = 0.0
    base_url: str | None = None

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.backend, "model": self.model, "cost_per_mtok": self.cost_per_mtok}
        if self.base_url is not None:
            out["base_url"] = self.base_url
        return out


DEFAULT_ROUTING: dict[str, Tier] = {
    "simple": Tier("claude", "claude-haiku-4-5-20251001", 0.25),
    "medium": Tier("claude", "claude-sonnet-4-6", 3.00),
    "complex": Tier("claude", "claude-opus-4-7", 15.00),
}


def _tier_from_json(name: str, raw: Any, backends: tuple[str, ...]) -> Tier:
    where = f"route_config: tier {name!r}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be an object")
    unknown = set(raw) - {"backend", "model", "base_url", "cost_per_mtok"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    backend, model = raw.get("backend"), raw.get("model")
    if backend not in backends:
        raise ConfigError(f"{where}: backend {backend!r} is not one of {', '.join(backends)}")
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{where}: 'model' must be a non-empty string")
    base_url = raw.get("base_url")
    if base_url is not None and not isinstance(base_url, str):
        raise ConfigError(f"{where}: 'base_url' must be a string")
    cost = raw.get("cost_per_mtok", 0.0)
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
        raise ConfigError(f"{where}: 'cost_per_mtok' must be a number >= 0, got {cost!r}")
    return Tier(backend, model, float(cost), base_url)


def load_routing(path: str | None, backends: tuple[str, ...]) -> dict[str, Tier]:
    """The default table with the tiers listed in ``path`` replaced (the others fall through).

    A listed tier needs ``backend`` and ``model``; ``base_url`` defaults to the backend's
    default URL and ``cost_per_mtok`` to 0 (unknown price, not counted).
    """
    table = dict(DEFAULT_ROUTING)
    if path is None:
        return table
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"route_config: cannot read {path!r}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"route_config: {path!r} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"route_config: {path!r} must hold a JSON object of tiers")
    for name, entry in raw.items():
        if name not in TIERS:
            raise ConfigError(f"route_config: unknown tier {name!r} (one of {', '.join(TIERS)})")
        table[name] = _tier_from_json(name, entry, backends)
    return table


@dataclass
class RouterStats:
    """Counters behind /v1/stats.intent_router."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    unclassified: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    cost_usd: float = 0.0
    usage_estimated: int = 0

    def schema(self, routing: Mapping[str, Tier]) -> dict[str, Any]:
        total = sum(self.counts.values())
        out: dict[str, Any] = {"classified_total": total, "unclassified": self.unclassified}
        for tier in TIERS:
            out[tier] = self.counts[tier]
            out[f"{tier}_pct"] = round(100.0 * self.counts[tier] / total, 1) if total else 0.0
        out["estimated_cost_usd"] = round(self.cost_usd, 6)
        out["tokens"] = dict(self.tokens)
        out["usage_estimated"] = self.usage_estimated
        out["routing"] = {t: routing[t].public() for t in TIERS}
        return out


EmbedFn = Callable[[list[str]], Awaitable["np.ndarray | None"]]


class IntentRouter:
    """Classifies queries and accounts cost; centroids are built on first use.

    ``embed`` is the proxy's embedder (``EmbedderChoice.embed_many``); when it returns None
    the centroids are retried on the next query and the query goes to medium. With a learned
    ``model`` (``--route-classifier``) no centroids are built; a query vector whose dimension
    differs from the model's (another embedder than the one it was trained on) goes to medium,
    unclassified, and is counted in ``dim_mismatch``.
    """

    def __init__(self, routing: Mapping[str, Tier], embed: EmbedFn, margin: float = DEFAULT_MARGIN,
                 backends: Mapping[str, Backend] | None = None, model: LearnedRouteModel | None = None,
                 model_path: str | None = None) -> None:
        self.routing = dict(routing)
        self.margin = margin
        self.backends: dict[str, Backend] = dict(backends or {})
        self._embed = embed
        self._classifier: CentroidClassifier | LearnedClassifier | None = (
            LearnedClassifier(model) if model is not None else None)
        self.classifier_name = "learned" if model is not None else "centroid"
        self.model_path = model_path
        self.dim_mismatch = 0
        self.stats = RouterStats()

    async def _ready(self) -> CentroidClassifier | LearnedClassifier | None:
        if self._classifier is None:
            vecs = await self._embed(list(SIMPLE_SEEDS + COMPLEX_SEEDS))
            if vecs is not None and len(vecs) == len(SIMPLE_SEEDS) + len(COMPLEX_SEEDS):
                n = len(SIMPLE_SEEDS)
                self._classifier = CentroidClassifier.from_seed_vectors(vecs[:n], vecs[n:], self.margin)
        return self._classifier

    async def classify(self, text: str, vector: np.ndarray | None) -> RouteDecision:
        """Decide the tier of ``text``; ``vector`` is reused when L1 already embedded it."""
        classifier = await self._ready()
        if classifier is not None and vector is not None and len(vector) != classifier.dim:
            vector = None  # another vector space (should not happen: same embedder)
        if classifier is not None and vector is None and not _CODE.search(text):
            got = await self._embed([text])
            vector = got[0] if got is not None and len(got) == 1 else None
            if vector is not None and len(vector) != classifier.dim:
                self.dim_mismatch += 1
                vector = None
        if classifier is None:
            decision = (RouteDecision("complex", 1.0, "code") if _CODE.search(text)
                        else RouteDecision("medium", 0.0, "no_embedding", classified=False))
        else:
            decision = classifier.classify(text, vector)
        if decision.classified:
            self.stats.counts[decision.tier] += 1
        else:
            self.stats.unclassified += 1
        return decision

    def account(self, tier: str, usage: Mapping[str, Any] | None, estimate_chars: int = 0) -> None:
        """Add one routed completion's tokens and cost to ``tier``."""
        tokens = usage.get("total_tokens") if isinstance(usage, Mapping) else None
        if not isinstance(tokens, int) or isinstance(tokens, bool):
            tokens = (estimate_chars + 3) // 4
            self.stats.usage_estimated += 1
        self.stats.tokens[tier] += tokens
        self.stats.cost_usd += tokens * self.routing[tier].cost_per_mtok / 1e6

    def x_pion(self, decision: RouteDecision) -> dict[str, Any]:
        tier = self.routing[decision.tier]
        return {"tier": decision.tier, "backend": tier.backend, "model": tier.model,
                "confidence": decision.confidence, "heuristic_boost": decision.heuristic_boost,
                "classifier": self.classifier_name}

    def schema(self) -> dict[str, Any]:
        out = self.stats.schema(self.routing)
        out["classifier"] = self.classifier_name
        if isinstance(self._classifier, LearnedClassifier):
            m = self._classifier.model
            out["learned"] = {"file": self.model_path, "kind": m.kind, "threshold": round(m.threshold, 6),
                              "margin": m.margin,
                              "candidate": m.meta.get("candidate"), "embedder": m.meta.get("embedder"),
                              "dim": m.dim, "dim_mismatch": self.dim_mismatch}
        return out


def make_router(routing: Mapping[str, Tier], margin: float, embed: EmbedFn, http: httpx.AsyncClient,
                model: LearnedRouteModel | None = None, model_path: str | None = None) -> IntentRouter:
    """An ``IntentRouter`` with one backend client per tier (tiers may use different backends)."""
    backends = {name: make_backend(t.backend, t.base_url, http) for name, t in routing.items()}
    return IntentRouter(routing, embed, margin, backends, model=model, model_path=model_path)
