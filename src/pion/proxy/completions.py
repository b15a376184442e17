"""POST /v1/chat/completions: L1 lookup -> guard -> backend -> store.

Order of events for one request:
  1. validate the body (400 on anything malformed), resolve the model;
  2. cache policy (Cache-Control, body "cache", n > 1, last message must be user text);
  3. L1 lookup in the request's scope, keyed by the question resolved with its earlier
     user turns (``scope.resolved_text``); a hit must pass the check chosen by
     ``--verifier`` (``hit_verifier.py``: the guard, or WordNet alignment);
  4. with --distill, an L1 miss tries the L3 concept and L3b fragment stores (``distill.py``);
  5. with --rag-index, the top-k documents of the index are prepended (``rag.py``; the scope
     of step 3 already includes the index name);
  6. on a miss the backend answers (with --route, the tier's backend and model: ``router.py``);
     a completion finished by "stop" without tool calls is stored before the reply goes
     out (streams: after the last chunk).
Every reply carries ``x_pion`` and ``X-Pion-Cache: HIT | MISS | BYPASS``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from pion.proxy.backends.base import (Backend, BackendHTTPError, BackendUnavailable, completion_id,
                                      make_chunk, make_completion, openai_error)
from pion.proxy.cache_client import CacheHit, SemanticCacheClient
from pion.proxy.config import ServeConfig
from pion.proxy.distill import Distiller, DistillHit
from pion.proxy.embedders import EmbedderChoice
from pion.proxy.metrics import ServeStats
from pion.proxy.hit_verifier import HitVerifier
from pion.proxy.router import IntentRouter, RouteDecision
from pion.proxy.rag import RagOutcome, RagRetriever, inject, rag_scope
from pion.proxy.scope import CachePolicy, ScopeKey, cache_policy, last_user_text, resolved_text, scope_of, storable

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class BadRequest(Exception):
    """The request body is not a valid chat-completions request."""


def validate(raw: bytes) -> dict[str, Any]:
    """Parse and check a request body; raises ``BadRequest`` with the reason."""
    try:
        body = json.loads(raw)
    except ValueError:
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' is required and must be a non-empty array")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a 'role'")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean")
    return body


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@dataclass
class Lookup:
    """Cache state of one request once the lookup has run."""

    scope: ScopeKey | None = None
    text: str = ""
    vector: Any = None
    store: bool = False
    ran: bool = False
    hit: CacheHit | None = None
    similarity: float | None = None
    distilled: DistillHit | None = None
    backend: Backend | None = None
    route: RouteDecision | None = None
    rag: RagOutcome | None = None

    @property
    def header(self) -> str:
        return "HIT" if self.hit or self.distilled else ("MISS" if self.ran else "BYPASS")


class ChatCompletions:
    """The chat-completions pipeline, shared by all requests of one app."""

    def __init__(self, config: ServeConfig, backend: Backend, cache: SemanticCacheClient,
                 embedder: EmbedderChoice, stats: ServeStats, *, router: IntentRouter | None = None,
                 distill: Distiller | None = None, verifier: HitVerifier | None = None,
                 rag: RagRetriever | None = None) -> None:
        self.config = config
        self.verifier = verifier or HitVerifier()
        self.rag = rag
        self.backend = backend
        self.cache = cache
        self.embedder = embedder
        self.stats = stats
        self.router = router
        self.distill = distill

    async def handle(self, raw: bytes, headers: Mapping[str, str]) -> Response:
        t0 = time.perf_counter()
        try:
            body = validate(raw)
            model = self.config.model or body.get("model")
            if not isinstance(model, str) or not model:
                raise BadRequest("'model' is required")
        except BadRequest as exc:
            self.stats.record("error", _ms(t0))
            return JSONResponse(openai_error(str(exc)), status_code=400, headers={"x-pion-cache": "BYPASS"})
        policy = cache_policy(body, headers, self.config.cache_active)
        body = {k: v for k, v in body.items() if k != "cache"} | {"model": model}
        look = await self._lookup(body, policy, model)
        if look.hit is not None:
            return self._serve_hit(look.hit, look, model, bool(body.get("stream")), t0)
        if self.distill is not None and look.ran and look.scope is not None:
            look.distilled = await self.distill.lookup(look.scope, look.text, look.vector)
            if (d := look.distilled) is not None:
                return self._serve_text(d.content, d.model or model, d.source, look, bool(body.get("stream")), t0)
        if self.rag is not None:  # before routing: the original design routes RAG-augmented requests too
            body = await self._with_rag(body, look)
        if self.router is not None:
            body = await self._route(self.router, body, look)
        try:
            if body.get("stream"):
                return await self._stream_miss(body, headers, look, t0)
            return await self._complete_miss(body, headers, look, t0)
        except BackendUnavailable as exc:
            self.stats.record("error", _ms(t0))
            payload = openai_error(str(exc), "backend_unavailable")
            payload["x_pion"] = self._x_pion("full_inference", t0, look)
            return JSONResponse(payload, status_code=502, headers={"x-pion-cache": look.header})
        except BackendHTTPError as exc:
            self.stats.record("error", _ms(t0))
            payload = exc.payload
            if isinstance(payload, dict):  # the backend's error body, plus where it came from
                payload = {**payload, "x_pion": self._x_pion("full_inference", t0, look)}
            return JSONResponse(payload, status_code=exc.status, headers={"x-pion-cache": look.header})

    async def _lookup(self, body: dict[str, Any], policy: CachePolicy, model: str) -> Lookup:
        look = Lookup()
        if not (policy.lookup or policy.store) or not await self.cache.ready():
            return look
        text = resolved_text(body) or ""
        usable, vector = await self.embedder.vector(text)
        if not usable:
            return look
        if vector is None and self.embedder.space == "pion" and self.config.guard_enabled:
            # --verifier learned: the proxy's MiniLM pass (the server's model) gives the vector
            # and the token states the check of a hit needs; None leaves embedding to the server.
            vector = await self.verifier.query_vector(text)
        look.scope = scope_of(body, self.backend.name, model, self.embedder.space)
        if self.rag is not None:
            look.scope = rag_scope(look.scope, self.rag.index)
        look.text, look.vector, look.store = text, vector, policy.store
        if not policy.lookup:
            return look
        # When the server embeds (vector None) and the answer may be stored, ask for the
        # vector back: a miss then stores with SET ... VECTOR, one embedding per request.
        reply = await self.cache.lookup(look.scope, look.text, self.config.lookup_threshold,
                                        vector, want_vector=vector is None and policy.store)
        if reply.vector is not None:
            look.vector = reply.vector
        look.ran = self.cache.available
        if look.ran:
            self.stats.m_lookups.inc()
        if reply.best_similarity is not None:
            # Every lookup that had an entry to compare, hit or miss (GET ... WITHBEST).
            look.similarity = reply.best_similarity
            self.stats.m_similarity.observe(reply.best_similarity)
        if (hit := reply.hit) is not None:
            if not self.config.guard_enabled:
                look.hit = hit
            else:
                verdict = await self.verifier.verify(look.text, str(hit.meta.get("q", "")), hit.similarity)
                self.stats.record_verdict(verdict)
                if verdict.ok:
                    look.hit = hit
        if look.hit is None and look.ran:
            self.stats.m_misses.inc()
        return look

    @staticmethod
    async def _route(router: IntentRouter, body: dict[str, Any], look: Lookup) -> dict[str, Any]:
        """Pick the tier for a real backend call: its backend, and its model in the body."""
        text = look.text or last_user_text(body) or ""
        look.route = await router.classify(text, look.vector)
        look.backend = router.backends[look.route.tier]
        return body | {"model": router.routing[look.route.tier].model}

    def _account(self, look: Lookup, usage: Any, chars: int) -> None:
        if self.router is not None and look.route is not None:
            self.router.account(look.route.tier, usage, chars)
    async def _with_rag(self, body: dict[str, Any], look: Lookup) -> dict[str, Any]:
        """The body with the retrieved context injected (unchanged when nothing was found)."""
        assert self.rag is not None  # only called with --rag-index
        # The text L1 looked up (a follow-up resolved against earlier turns), else the last
        # user message; nothing to search for when neither exists.
        text = look.text or last_user_text(body)
        if not text:
            return body
        # The lookup's vector when it has one (proxy-side embedder, or the server's returned
        # with WITHVECTOR); else the retriever asks pion-server's AI.EMBED.
        look.rag = await self.rag.retrieve(text, look.vector)
        if not look.rag.documents:
            return body
        self.stats.rag_injections += 1
        return {**body, "messages": inject(list(body["messages"]), look.rag.documents)}

    def _x_pion(self, source: str, t0: float, look: Lookup) -> dict[str, Any]:
        x: dict[str, Any] = {"source": source, "latency_ms": _ms(t0)}
        if look.similarity is not None:
            x["similarity"] = round(look.similarity, 4)
        if look.distilled is not None:
            x["l3_similarity"] = round(look.distilled.similarity, 4)
        if look.route is not None and self.router is not None:
            x["route"] = self.router.x_pion(look.route)
        if look.rag is not None:
            x["rag"] = look.rag.x_pion()
            if look.rag.error is not None:
                x["rag_error"] = look.rag.error
        return x

    def _serve_hit(self, hit: CacheHit, look: Lookup, model: str, stream: bool, t0: float) -> Response:
        return self._serve_text(str(hit.response.get("content", "")), str(hit.response.get("model") or model),
                                "l1_cache", look, stream, t0)

    def _serve_text(self, content: str, served_model: str, source: str, look: Lookup, stream: bool,
                    t0: float) -> Response:
        headers = {"x-pion-cache": "HIT"}
        if not stream:
            completion = make_completion(served_model, content, "stop")
            completion["x_pion"] = self._x_pion(source, t0, look)
            self.stats.record(source, _ms(t0))
            return JSONResponse(completion, headers=headers)
        cid, created = completion_id(), int(time.time())

        async def chunks() -> AsyncIterator[bytes]:
            yield sse(make_chunk(cid, served_model, {"role": "assistant", "content": ""}, created=created))
            yield sse(make_chunk(cid, served_model, {"content": content}, created=created))
            last = make_chunk(cid, served_model, {}, "stop", created=created)
            last["x_pion"] = self._x_pion(source, t0, look)
            self.stats.record(source, _ms(t0))
            yield sse(last)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream", headers=SSE_HEADERS | headers)

    async def _store(self, look: Lookup, content: str, model: str) -> None:
        if look.store and look.scope is not None:
            await self.cache.set(look.scope, look.text, {"content": content, "model": model},
                                 {"q": look.text, "created": int(time.time())},
                                 self.config.cache_ttl_s, look.vector)
            if self.distill is not None:
                await self.distill.ingest(look.scope, look.text, content, model)

    async def _complete_miss(self, body: dict[str, Any], headers: Mapping[str, str], look: Lookup,
                             t0: float) -> Response:
        tb = time.perf_counter()
        backend = look.backend or self.backend
        completion = await backend.complete(body, headers)
        self.stats.m_backend.labels(backend=backend.name).observe(time.perf_counter() - tb)
        self._account(look, completion.get("usage"), 0)
        if (content := storable(completion)) is not None:
            await self._store(look, content, str(completion.get("model") or body["model"]))
        completion["x_pion"] = self._x_pion("full_inference", t0, look)
        self.stats.record("full_inference", _ms(t0))
        return JSONResponse(completion, headers={"x-pion-cache": look.header})

    async def _stream_miss(self, body: dict[str, Any], headers: Mapping[str, str], look: Lookup,
                           t0: float) -> Response:
        tb = time.perf_counter()
        backend = look.backend or self.backend
        upstream = backend.stream(body, headers)
        try:
            first = await upstream.__anext__()
        except StopAsyncIteration:
            raise BackendHTTPError(502, openai_error("backend closed the stream without data",
                                                     "backend_error")) from None

        async def chunks() -> AsyncIterator[bytes]:
            parts: list[str] = []
            finish: str | None = None
            tool_calls = False
            usage: Any = None
            model = str(first.get("model") or body["model"])
            try:
                chunk: dict[str, Any] | None = first
                while chunk is not None:
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        if isinstance(delta.get("content"), str):
                            parts.append(delta["content"])
                        tool_calls = tool_calls or bool(delta.get("tool_calls") or delta.get("function_call"))
                        finish = choice.get("finish_reason") or finish
                    if finish is not None and any(c.get("finish_reason") for c in chunk.get("choices") or []):
                        chunk = {**chunk, "x_pion": self._x_pion("full_inference", t0, look)}
                    yield sse(chunk)
                    chunk = await anext(upstream, None)
            except (BackendHTTPError, BackendUnavailable) as exc:
                payload = exc.payload if isinstance(exc, BackendHTTPError) else openai_error(str(exc))
                self.stats.record("error", _ms(t0))
                yield sse(payload)
                return
            finally:
                await upstream.aclose()
            self.stats.m_backend.labels(backend=backend.name).observe(time.perf_counter() - tb)
            text = "".join(parts)
            self._account(look, usage, len(text) + len(look.text or last_user_text(body) or ""))
            if finish == "stop" and not tool_calls and text:
                await self._store(look, text, model)
            self.stats.record("full_inference", _ms(t0))
            yield b"data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream",
                                 headers=SSE_HEADERS | {"x-pion-cache": look.header})


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)
