"""pion-serve's HTTP surface (FastAPI): chat completions, models, health, stats, metrics.

``make_app(config)`` builds everything from one ``ServeConfig``: a shared keep-alive
``httpx.AsyncClient`` for the backend, the L1 cache client, counters. At start a
background task warms the embedder (the server loads its model on first use) so the
first real request does not pay for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from pion.proxy.backends import make_backend
from pion.proxy.backends.base import BackendHTTPError, BackendUnavailable, openai_error
from pion.proxy.cache_client import SemanticCacheClient
from pion.proxy.completions import ChatCompletions
from pion.proxy.config import BACKENDS, ServeConfig
from pion.proxy.distill import Distiller
from pion.proxy.embedders import EmbedderChoice
from pion.proxy.hit_verifier import HitVerifier
from pion.proxy.metrics import ServeStats
from pion.proxy.openapi_schema import CHAT_REQUEST_OPENAPI
from pion.proxy.learned_router import load_model
from pion.proxy.router import load_routing, make_router
from pion.proxy.stats_extra import layer_stats
from pion.proxy.rag import RagRetriever


def make_app(config: ServeConfig) -> FastAPI:
    """The ASGI app for ``config``; resources live for the app's lifespan."""
    state: dict[str, Any] = {}
    # Read --route-config now so a bad file stops the start with a ConfigError.
    routing = load_routing(config.route_config, BACKENDS) if config.route else None
    route_model = load_model(config.route_classifier) if config.route_classifier else None

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        http = httpx.AsyncClient(timeout=httpx.Timeout(config.backend_timeout_s, connect=5.0),
                                 limits=httpx.Limits(max_keepalive_connections=32, max_connections=256))
        cache = SemanticCacheClient(config.pion_host, config.pion_port, config.pion_password,
                                    config.cache_name, config.pion_retry_s)
        embedder = EmbedderChoice(config, cache, http)
        stats = ServeStats()
        backend = make_backend(config.backend, config.effective_backend_url, http)
        router = make_router(routing, config.route_margin, embedder.embed_many, http, route_model,
                             config.route_classifier) if routing else None
        distill = (Distiller(config.pion_host, config.pion_port, config.pion_password, config.cache_name,
                             embedder.embed_many, ttl_s=config.cache_ttl_s, direct=config.l3_direct_threshold,
                             composite=config.l3_composite_threshold, retry_s=config.pion_retry_s)
                   if config.distill and config.cache_active else None)
        verifier = HitVerifier(config.verifier)
        rag = None if config.rag_index is None else RagRetriever(
            config.pion_host, config.pion_port, config.pion_password, config.rag_index, config.rag_k,
            config.rag_field, config.rag_vector_field)
        state.update(http=http, cache=cache, embedder=embedder, stats=stats, backend=backend,
                     router=router, distill=distill, verifier=verifier,
                     chat=ChatCompletions(config, backend, cache, embedder, stats, router=router, distill=distill,
                                          verifier=verifier, rag=rag))
        # Warm both the server's embedder and WordNet so the first hit pays for neither.
        warm = [asyncio.create_task(embedder.resolve()), asyncio.create_task(verifier.load())] \
            if config.cache_active and config.guard_enabled and config.verifier in ("aligned", "learned", "cross") else \
            [asyncio.create_task(embedder.resolve())] if config.cache_active else []
        try:
            yield
        finally:
            for task in warm:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await cache.close()
            if distill is not None:
                await distill.close()
            if rag is not None:
                await rag.close()
            await http.aclose()

    app = FastAPI(title="pion-serve", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.post("/v1/chat/completions", openapi_extra=CHAT_REQUEST_OPENAPI)  # the raw body's schema
    async def chat_completions(request: Request) -> Response:
        chat: ChatCompletions = state["chat"]
        return await chat.handle(await request.body(), request.headers)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        try:
            return JSONResponse(await state["backend"].models(request.headers))
        except BackendUnavailable as exc:
            return JSONResponse(openai_error(str(exc), "backend_unavailable"), status_code=502)
        except BackendHTTPError as exc:
            return JSONResponse(exc.payload, status_code=exc.status)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        # degraded: the proxy answers, but uncached (embedder or pion-server down)
        reasons = []
        if config.cache_active and state["embedder"].last_error:
            reasons.append(f"embedder {state['embedder'].last_error}")
        if config.cache_active and not state["cache"].available:
            reasons.append(f"pion-server {config.pion_host}:{config.pion_port}: {state['cache'].last_error}")
        return {"status": "degraded", "reasons": reasons} if reasons else {"status": "ok"}

    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        cache: SemanticCacheClient = state["cache"]
        enabled = config.cache_active and await cache.ready()
        doc = state["stats"].schema(backend=config.backend, model=config.model,
                                    cache_enabled=enabled, embedder=state["embedder"].stats(),
                                    extra=await layer_stats(config, state["cache"], state["router"],
                                                            state["distill"]) | {"rag_index": config.rag_index})
        doc["l1_verdicts"] |= state["verifier"].describe()
        return doc

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state["stats"].prometheus(), media_type="text/plain; version=0.0.4")

    return app
