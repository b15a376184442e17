"""pion-llm's HTTP layer: OpenAI routes in front of one model worker.

Concurrency model: the event loop only parses, validates and streams. All model work goes through
``ModelWorker``: a bounded FIFO of jobs consumed by one task that runs each job's forward passes in
a thread (``asyncio.to_thread``), so one forward runs at a time and the loop stays responsive. A
job reports back through an ``asyncio.Queue`` of events; a client that disconnects sets the job's
``cancelled`` flag, which the thread checks between tokens. More than ``--max-queue`` waiting jobs
→ 429; while the model loads → 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pion.llm import schemas
from pion.llm.engine import Engine, SamplingParams
from pion.llm.metrics import LlmMetrics
from pion.llm.segments import PromptPlan, plan_chat, plan_text

logger = logging.getLogger("pion.llm")

EngineFactory = Callable[[], Engine]


class ApiError(Exception):
    """An error answered as OpenAI-shaped JSON with an HTTP status."""

    def __init__(self, status: int, message: str, err_type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.err_type, self.param, self.code = status, message, err_type, param, code

    def response(self) -> JSONResponse:
        return JSONResponse(schemas.error_body(self.message, self.err_type, self.param, self.code),
                            status_code=self.status)


@dataclass
class Job:
    """One request's model work and the channel its results come back on."""

    plan: PromptPlan
    params: SamplingParams
    events: asyncio.Queue[tuple[str, Any]]
    loop: asyncio.AbstractEventLoop
    submitted: float = field(default_factory=time.perf_counter)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def emit(self, kind: str, payload: Any = None) -> None:
        """Thread-safe: hand an event to the request's coroutine."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, payload))


class ModelWorker:
    """The single consumer of model jobs; see the module docstring."""

    def __init__(self, max_queue: int, metrics: LlmMetrics) -> None:
        self.max_queue = max_queue
        self.metrics = metrics
        self.engine: Engine | None = None
        self.load_error: str | None = None
        self.current: Job | None = None
        self._jobs: asyncio.Queue[Job] = asyncio.Queue()

    def submit(self, plan: PromptPlan, params: SamplingParams) -> Job:
        if self.engine is None:
            raise self.not_ready()
        if self._jobs.qsize() >= self.max_queue:
            raise ApiError(429, f"too many requests waiting (--max-queue {self.max_queue}); retry shortly",
                           "rate_limit_error", code="rate_limit_exceeded")
        job = Job(plan, params, asyncio.Queue(), asyncio.get_running_loop())
        self._jobs.put_nowait(job)
        self.metrics.queue_depth.set(self._jobs.qsize())
        return job

    def not_ready(self) -> ApiError:
        """The 503 for a request that arrives before the model is usable (loading, or failed to load)."""
        if self.load_error:
            return ApiError(503, self.load_error, "server_error", code="model_load_failed")
        return ApiError(503, "the model is still loading; retry shortly", "server_error", code="model_loading")

    async def run(self) -> None:
        while True:
            job = await self._jobs.get()
            self.metrics.queue_depth.set(self._jobs.qsize())
            if job.cancelled.is_set():
                continue
            self.current = job
            try:
                await asyncio.to_thread(self._run_job, job)
            finally:
                self.current = None

    def cancel_all(self) -> None:
        """At shutdown: stop the running generation between tokens and drop waiting jobs."""
        if self.current is not None:
            self.current.cancelled.set()
        while not self._jobs.empty():
            self._jobs.get_nowait().cancelled.set()

    def _run_job(self, job: Job) -> None:
        """Runs in the worker thread: restore, prefill, decode until done or cancelled, store."""
        assert self.engine is not None  # submit() refuses jobs before load
        gen = None
        try:
            gen = self.engine.start(job.plan, job.params)
            job.emit("start", (gen.prompt_tokens, gen.cached_tokens))
            while not job.cancelled.is_set():
                step = gen.next_step()
                if step is None:
                    break
                job.emit("token", step.text)
            if job.cancelled.is_set():
                logger.info("client went away; generation cancelled after %d tokens", gen.completion_tokens)
            gen.finish()
            job.emit("done", (gen.finish_reason or "stop", gen.completion_tokens))
        except Exception as exc:  # reported to the client as a 500
            logger.exception("generation failed")
            if gen is not None:
                with contextlib.suppress(Exception):
                    gen.finish()
            job.emit("error", f"{type(exc).__name__}: {exc}")


def create_app(model_name: str, max_queue: int, engine_factory: EngineFactory) -> FastAPI:
    """Build the app; ``engine_factory`` runs in a thread at start-up (the model load)."""
    metrics = LlmMetrics()
    worker = ModelWorker(max_queue, metrics)
    created = schemas.now()
    fingerprint = "pion-llm"

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async def load() -> None:
            try:
                worker.engine = await asyncio.to_thread(engine_factory)
                logger.info("model %s ready", model_name)
            except Exception as exc:  # reported by /health and 503s
                worker.load_error = f"model failed to load: {type(exc).__name__}: {exc}"
                logger.exception("model failed to load")

        loader = asyncio.create_task(load())
        runner = asyncio.create_task(worker.run())
        yield
        worker.cancel_all()
        runner.cancel()
        loader.cancel()

    app = FastAPI(title="pion-llm", lifespan=lifespan)
    app.state.worker = worker
    app.state.metrics = metrics

    @app.exception_handler(ApiError)
    async def on_api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def on_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"msg": "invalid request", "loc": ()}
        param = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
        return JSONResponse(schemas.error_body(f"{param or 'request'}: {first.get('msg')}", param=param),
                            status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(schemas.error_body(str(exc.detail), param=None), status_code=exc.status_code)

    def check_model(requested: str) -> None:
        if requested != model_name:
            raise ApiError(400, f"model {requested!r} is not served here; this server serves {model_name!r}",
                           param="model", code="model_not_found")

    @app.get("/health")
    async def health() -> JSONResponse:
        body: dict[str, Any] = {"model": model_name, "queue": worker._jobs.qsize()}
        if worker.engine is None:
            body["status"] = "error" if worker.load_error else "loading"
            if worker.load_error:
                body["error"] = worker.load_error
            return JSONResponse(body, status_code=503)
        body["status"] = "ok"
        store = worker.engine.store
        body["prefix_cache"] = store.status() if store is not None else {"backend": "off", "status": "off"}
        if "warning" in body["prefix_cache"]:
            body["warnings"] = [body["prefix_cache"]["warning"]]
        return JSONResponse(body)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        metrics.requests.labels("/v1/models", "200").inc()
        return schemas.model_list(model_name, created)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: schemas.ChatCompletionRequest, request: Request) -> Response:
        check_model(body.model)
        engine = _ready_engine(worker)
        plan = await asyncio.to_thread(plan_chat, engine.tokenizer, body.template_messages())
        return await _respond(worker, metrics, request, "/v1/chat/completions", plan, body, chat_mode=True,
                              fingerprint=fingerprint)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: schemas.CompletionRequest, request: Request) -> Response:
        check_model(body.model)
        engine = _ready_engine(worker)
        prompt = body.prompt[0] if isinstance(body.prompt, list) and isinstance(body.prompt[0], str) else body.prompt
        if isinstance(prompt, list):
            vocab = len(engine.tokenizer)
            if any(not 0 <= int(t) < vocab for t in prompt):
                raise ApiError(400, f"prompt: token ids must be in [0, {vocab})", param="prompt")
            ids = [int(t) for t in prompt]
        else:
            ids = list(engine.tokenizer.encode(prompt, add_special_tokens=False))
            if not ids:
                raise ApiError(400, "prompt: encodes to no tokens", param="prompt")
        return await _respond(worker, metrics, request, "/v1/completions", plan_text(ids), body, chat_mode=False,
                              fingerprint=fingerprint)

    return app


def _ready_engine(worker: ModelWorker) -> Engine:
    if worker.engine is None:
        raise worker.not_ready()
    return worker.engine


async def _respond(worker: ModelWorker, metrics: LlmMetrics, request: Request, endpoint: str, plan: PromptPlan,
                   body: schemas.ChatCompletionRequest | schemas.CompletionRequest, chat_mode: bool,
                   fingerprint: str) -> Response:
    engine = _ready_engine(worker)
    if plan.n_tokens + body.effective_max_tokens() > engine.context_tokens:
        metrics.requests.labels(endpoint, "400").inc()
        raise ApiError(400, f"this model's context is {engine.context_tokens} tokens; the prompt has "
                       f"{plan.n_tokens} and max_tokens asks for {body.effective_max_tokens()} more",
                       param="messages" if chat_mode else "prompt", code="context_length_exceeded")
    try:
        job = worker.submit(plan, body.sampling(engine.generation_defaults))
    except ApiError as exc:
        metrics.requests.labels(endpoint, str(exc.status)).inc()
        raise
    rid = schemas.new_id("chatcmpl" if chat_mode else "cmpl")
    created = schemas.now()
    if body.stream:
        metrics.requests.labels(endpoint, "200").inc()
        return StreamingResponse(_stream(job, metrics, rid, created, body, chat_mode, fingerprint),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
    try:
        result = await _collect(job, metrics)
    finally:
        watcher.cancel()
        job.cancelled.set()  # no-op when finished; stops the worker if this coroutine was cancelled
    if isinstance(result, ApiError):
        metrics.requests.labels(endpoint, str(result.status)).inc()
        raise result
    text, finish_reason, prompt_tokens, cached, completion_tokens = result
    metrics.requests.labels(endpoint, "200").inc()
    use = schemas.usage(prompt_tokens, completion_tokens, cached)
    if chat_mode:
        return JSONResponse(schemas.chat_completion(rid, body.model, created, text, finish_reason, use, fingerprint))
    return JSONResponse(schemas.text_completion(rid, body.model, created, text, finish_reason, use, fingerprint))


async def _cancel_on_disconnect(request: Request, job: Job) -> None:
    """The body is already read, so the next ASGI message is the client's disconnect."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancelled.set()
            return


def _observe_start(metrics: LlmMetrics, prompt_tokens: int, cached: int) -> None:
    metrics.prompt_tokens.inc(prompt_tokens)
    metrics.cached_tokens.inc(cached)


async def _collect(job: Job, metrics: LlmMetrics) -> tuple[str, str, int, int, int] | ApiError:
    pieces: list[str] = []
    prompt_tokens = cached = 0
    first = True
    while True:
        kind, payload = await job.events.get()
        if kind == "start":
            prompt_tokens, cached = payload
            _observe_start(metrics, prompt_tokens, cached)
        elif kind == "token":
            if first:
                metrics.ttft.observe(time.perf_counter() - job.submitted)
                first = False
            pieces.append(payload)
        elif kind == "done":
            finish_reason, completion_tokens = payload
            metrics.completion_tokens.inc(completion_tokens)
            return "".join(pieces), finish_reason, prompt_tokens, cached, completion_tokens
        else:
            return ApiError(500, str(payload), "server_error")


async def _stream(job: Job, metrics: LlmMetrics, rid: str, created: int,
                  body: schemas.ChatCompletionRequest | schemas.CompletionRequest, chat_mode: bool,
                  fingerprint: str) -> AsyncIterator[bytes]:
    """SSE chunks in OpenAI's order: role chunk, content chunks, finish chunk, [usage chunk], [DONE]."""
    model = body.model
    prompt_tokens = cached = 0
    first = True

    def piece(text: str, finish_reason: str | None) -> dict[str, Any]:
        if chat_mode:
            delta = {"content": text} if finish_reason is None else {}
            return schemas.chat_chunk(rid, model, created, delta, finish_reason, fingerprint)
        return schemas.text_completion(rid, model, created, text, finish_reason, None, fingerprint)

    try:
        while True:
            kind, payload = await job.events.get()
            if kind == "start":
                prompt_tokens, cached = payload
                _observe_start(metrics, prompt_tokens, cached)
                if chat_mode:
                    yield schemas.sse(schemas.chat_chunk(rid, model, created, {"role": "assistant", "content": ""},
                                                         None, fingerprint))
            elif kind == "token":
                if first:
                    metrics.ttft.observe(time.perf_counter() - job.submitted)
                    first = False
                if payload:
                    yield schemas.sse(piece(payload, None))
            elif kind == "done":
                finish_reason, completion_tokens = payload
                metrics.completion_tokens.inc(completion_tokens)
                yield schemas.sse(piece("", finish_reason))
                if body.include_usage:
                    obj = "chat.completion.chunk" if chat_mode else "text_completion"
                    use = schemas.usage(prompt_tokens, completion_tokens, cached)
                    yield schemas.sse(schemas.usage_chunk(rid, obj, model, created, use, fingerprint))
                yield schemas.sse("[DONE]")
                return
            else:
                yield schemas.sse(schemas.error_body(str(payload), "server_error"))
                yield schemas.sse("[DONE]")
                return
    finally:
        job.cancelled.set()  # a disconnect cancels this generator; the worker stops between tokens
