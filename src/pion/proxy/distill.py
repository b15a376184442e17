"""``--distill``: the L3 concept store and the L3b fragment store, tried after an L1 miss.

What the original design leaves open, and what this module does:

* **Concept** (L3): after a full inference whose answer L1 stores, one concept is stored:
  the question's *intent* (lowercased, question framing and filler words dropped: "How can
  I reset my password?" -> "reset password") is embedded; the entry's response is the
  full answer, its META the original question and a one-sentence summary of the answer.
  A query's intent is matched against concept intents: two phrasings of one question
  that differ mostly in framing ("what's the way to", "could you tell me how") are far
  closer as intents than as sentences, which is where L1 misses.
* **L3 direct**: the best concept >= ``direct_threshold`` *and* the L1 guard accepts its
  original question for the query -> that concept's answer is served verbatim.
* **L3 composite**: a query of several parts ("... and ...?", "...? ...?", ";") whose every
  part hits its own concept >= ``composite_threshold``, each accepted by the guard for its
  part, and the query accepted by the guard against the parts' questions joined -> the
  answers are served one after the other, each under its question. Nothing is composed
  from concepts the guard refuses, so no composite is served where L1 would refuse.
* **L3b fragments**: every sentence (up to 8) of a stored answer, embedded as is. When
  neither L1 nor L3 hits, the query is matched against fragments >= ``direct_threshold``;
  the fragment is served only if the guard accepts the question it came from. The original design
  calls L3b an untested hypothesis; docs/benchmarks.md has what it measured.

Storage: pion-server's AI.SEMANTIC_CACHE under the cache names ``<cache>:l3`` and
``<cache>:l3b``, in the request's L1 scope (so never across system prompts, models or
conversations), persisted by the server's WAL/snapshots like L1. No new server command.

**Calibration** (the original design's "workload sensitivity"): at each concept ingest the new
intent's similarity to its nearest stored concept (causal top-1) is recorded when the guard
calls the two questions different: the similarity distribution of *different* questions in
this corpus, which a threshold must stay above. (Tuned on the dev split: counting every
nearest neighbour let missed paraphrases of one question push the threshold up.) Once
``MIN_SAMPLES`` are in, direct = clamp(quantile ``DIRECT_Q`` + ``MARGIN``) and composite =
direct - ``COMPOSITE_GAP``; before that the original design's defaults (0.90 / 0.85). A flag value
pins a threshold. The sample lives in the proxy (restarts recalibrate).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pion.proxy import guard
from pion.proxy.cache_client import SemanticCacheClient
from pion.proxy.scope import ScopeKey

DEFAULT_DIRECT = 0.90
DEFAULT_COMPOSITE = 0.85
MIN_SAMPLES = 20
DIRECT_Q = 0.95
MARGIN = 0.02
COMPOSITE_GAP = 0.03
DIRECT_RANGE = (0.80, 0.97)
MAX_SAMPLES = 5000
MAX_FRAGMENTS = 8
MIN_FRAGMENT_CHARS = 20

EmbedFn = Callable[[list[str]], Awaitable["np.ndarray | None"]]

_FRAMING = frozenset("""
a an the i me my we our you your is are was were be been am do does did can could would should
will shall may might must what whats how which who where when why please tell know explain show
give need want way ways best good steps step it its to of for on in at by with that this there
here just also really some any kindly hi hello hey thanks possible go about so if i'm i'd i've
what's how's there's let lets let's me
""".split())
_WORD = re.compile(r"[a-z0-9][a-z0-9'.-]*")
_PARTS = re.compile(r"\?\s+|;\s*|\s+and also\s+|,?\s+and\s+(?=(?:how|what|where|when|why|who|which|can|do|does|is|are)\b)",
                    re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def _stem(word: str) -> str:
    """resetting -> reset, passwords -> password: a light stem so inflections embed alike."""
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            word = word[: -len(suffix)]
            return word[:-1] if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "ls" else word
    if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 4:
        return word[:-1]
    return word


def intent_of(question: str) -> str:
    """The question without its framing: the words that say what is asked, lightly stemmed."""
    words = [w.strip(".'-") for w in _WORD.findall(question.lower().replace("\u2019", "'"))]
    kept = [_stem(w) for w in words if w and w not in _FRAMING]
    return " ".join(kept) if kept else question.strip().lower()


def parts_of(question: str) -> list[str]:
    """The sub-questions of a multi-part question (one element when it has one part)."""
    parts = [p.strip(" ,?") for p in _PARTS.split(question)]
    return [p for p in parts if len(p.split()) >= 2]


def sentences_of(answer: str) -> list[str]:
    out = [s.strip() for s in _SENTENCE.split(answer.strip())]
    return [s for s in out if len(s) >= MIN_FRAGMENT_CHARS][:MAX_FRAGMENTS]


@dataclass(frozen=True, slots=True)
class DistillHit:
    """An answer served by L3 / L3b instead of the backend."""

    source: str  # "l3_direct" | "l3_composite" | "l3b_fragment"
    content: str
    model: str
    similarity: float


@dataclass
class Calibration:
    """Causal top-1 similarities of stored concepts, and the thresholds they give."""

    pinned_direct: float | None = None
    pinned_composite: float | None = None

    def __post_init__(self) -> None:
        self.samples: deque[float] = deque(maxlen=MAX_SAMPLES)

    @property
    def calibrated(self) -> bool:
        return len(self.samples) >= MIN_SAMPLES

    @property
    def direct(self) -> float:
        if self.pinned_direct is not None:
            return self.pinned_direct
        if not self.calibrated:
            return DEFAULT_DIRECT
        q = float(np.quantile(np.asarray(self.samples), DIRECT_Q)) + MARGIN
        return round(min(max(q, DIRECT_RANGE[0]), DIRECT_RANGE[1]), 4)

    @property
    def composite(self) -> float:
        if self.pinned_composite is not None:
            return self.pinned_composite
        if not self.calibrated and self.pinned_direct is None:
            return DEFAULT_COMPOSITE
        return round(self.direct - COMPOSITE_GAP, 4)

    def report(self) -> dict[str, Any]:
        s = np.asarray(self.samples) if self.samples else None
        pct = (lambda q: round(float(np.quantile(s, q)), 4) if s is not None else None)
        return {"samples": len(self.samples), "calibrated": self.calibrated,
                "direct_quantile": DIRECT_Q, "margin": MARGIN,
                "pairwise_top1": {"p50": pct(0.5), "p90": pct(0.9), "p95": pct(0.95), "p99": pct(0.99),
                                  "max": round(float(s.max()), 4) if s is not None else None}}


@dataclass
class LayerCounts:
    stored: int = 0
    lookups: int = 0
    hits: int = 0
    guard_rejections: int = 0


class Distiller:
    """L3 + L3b for one proxy; all state is in pion-server except the calibration sample."""

    def __init__(self, host: str, port: int, password: str | None, cache_name: str, embed: EmbedFn,
                 *, ttl_s: float | None = None, direct: float | None = None, composite: float | None = None,
                 retry_s: float = 1.0) -> None:
        self.concepts = SemanticCacheClient(host, port, password, cache_name + ":l3", retry_s)
        self.fragments = SemanticCacheClient(host, port, password, cache_name + ":l3b", retry_s)
        self._embed = embed
        self._ttl_s = ttl_s
        self.calibration = Calibration(direct, composite)
        self.l3 = LayerCounts()
        self.composite_hits = 0
        self.l3b = LayerCounts()

    async def close(self) -> None:
        await self.concepts.close()
        await self.fragments.close()

    async def lookup(self, scope: ScopeKey, query: str, query_vector: np.ndarray | None) -> DistillHit | None:
        """After an L1 miss: L3 direct, then L3 composite, then L3b. None: call the backend."""
        parts = parts_of(query)
        texts = [intent_of(query)] + ([intent_of(p) for p in parts] if len(parts) > 1 else [])
        need_query_vec = query_vector is None
        vecs = await self._embed(texts + ([query] if need_query_vec else []))
        if vecs is None:
            return None
        qvec = vecs[-1] if need_query_vec else query_vector
        hit = await self._direct(scope, query, vecs[0])
        if hit is None and len(parts) > 1:
            hit = await self._composite(scope, parts, vecs[1:1 + len(parts)], query)
        if hit is None and qvec is not None:
            hit = await self._fragment(scope, query, qvec)
        return hit

    async def _direct(self, scope: ScopeKey, query: str, vec: np.ndarray) -> DistillHit | None:
        self.l3.lookups += 1
        reply = await self.concepts.lookup(scope, query, self.calibration.direct, vec, want_vector=False)
        if reply.hit is None:
            return None
        if not guard.check(query, str(reply.hit.meta.get("q", ""))).ok:
            self.l3.guard_rejections += 1
            return None
        self.l3.hits += 1
        return DistillHit("l3_direct", str(reply.hit.response.get("content", "")),
                          str(reply.hit.response.get("model", "")), reply.hit.similarity)

    async def _composite(self, scope: ScopeKey, parts: list[str], vecs: np.ndarray,
                         query: str) -> DistillHit | None:
        answers: list[tuple[str, str, float]] = []
        model = ""
        for part, vec in zip(parts, vecs):
            reply = await self.concepts.lookup(scope, part, self.calibration.composite, vec, want_vector=False)
            if reply.hit is None:
                return None
            q = str(reply.hit.meta.get("q", ""))
            if not guard.check(part, q).ok:
                self.l3.guard_rejections += 1
                return None
            answers.append((q, str(reply.hit.response.get("content", "")), reply.hit.similarity))
            model = model or str(reply.hit.response.get("model", ""))
        if len({q for q, _, _ in answers}) < len(answers) or \
                not guard.check(query, " ".join(q for q, _, _ in answers)).ok:
            self.l3.guard_rejections += 1
            return None
        self.composite_hits += 1
        content = "\n\n".join(f"{q}\n{a}" for q, a, _ in answers)
        return DistillHit("l3_composite", content, model, min(s for _, _, s in answers))

    async def _fragment(self, scope: ScopeKey, query: str, vec: np.ndarray) -> DistillHit | None:
        self.l3b.lookups += 1
        reply = await self.fragments.lookup(scope, query, self.calibration.direct, vec, want_vector=False)
        if reply.hit is None:
            return None
        if not guard.check(query, str(reply.hit.meta.get("q", ""))).ok:
            self.l3b.guard_rejections += 1
            return None
        self.l3b.hits += 1
        return DistillHit("l3b_fragment", str(reply.hit.response.get("content", "")),
                          str(reply.hit.response.get("model", "")), reply.hit.similarity)

    async def ingest(self, scope: ScopeKey, question: str, answer: str, model: str) -> None:
        """After a stored full inference: one concept and the answer's sentences."""
        intent = intent_of(question)
        fragments = sentences_of(answer)
        vecs = await self._embed([intent, *fragments])
        if vecs is None:
            return
        # The nearest stored concept (threshold -1: always the top-1). Its similarity is a
        # calibration sample only when the guard calls the two questions different.
        near = await self.concepts.lookup(scope, intent, -1.0, vecs[0], want_vector=False)
        if near.hit is not None and not guard.check(question, str(near.hit.meta.get("q", ""))).ok:
            self.calibration.samples.append(near.hit.similarity)
        summary = fragments[0] if fragments else answer[:200]
        meta = {"q": question, "intent": intent, "summary": summary}
        if await self.concepts.set(scope, intent, {"content": answer, "model": model}, meta,
                                   self._ttl_s, vecs[0]) is not None:
            self.l3.stored += 1
        for text, vec in zip(fragments, vecs[1:]):
            if await self.fragments.set(scope, text, {"content": text, "model": model}, {"q": question},
                                        self._ttl_s, vec) is not None:
                self.l3b.stored += 1

    def concepts_schema(self) -> dict[str, Any]:
        return {"store": self.concepts.cache_name, "stored": self.l3.stored, "lookups": self.l3.lookups,
                "direct_hits": self.l3.hits, "composite_hits": self.composite_hits,
                "guard_rejections": self.l3.guard_rejections,
                "direct_threshold": self.calibration.direct, "composite_threshold": self.calibration.composite,
                "threshold_source": "flag" if self.calibration.pinned_direct is not None
                else "calibrated" if self.calibration.calibrated else "default",
                "calibration": self.calibration.report()}

    def fragments_schema(self) -> dict[str, Any]:
        return {"store": self.fragments.cache_name, "stored": self.l3b.stored, "lookups": self.l3b.lookups,
                "hits": self.l3b.hits, "guard_rejections": self.l3b.guard_rejections,
                "threshold": self.calibration.direct}
