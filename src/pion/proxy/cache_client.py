"""pion-serve's connection to the L1 cache in pion-server (AI.SEMANTIC_CACHE over RESP).

The commands are spelled and their replies parsed by ``pion.client.commands`` (the same code
``PionClient`` runs); this module only awaits them on an asyncio connection and decodes the
stored JSON answer.

Failure is not an error for the proxy: when pion-server cannot be reached every call
returns "no hit" / "not stored", ``available`` turns False (``/v1/stats`` shows
cache_enabled: false) and the next call after ``retry_s`` tries to reconnect, so the
cache comes back on its own when the server does.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.asyncio.retry import Retry

from pion.client import commands
from pion.client.commands import Command
from pion.proxy.scope import ScopeKey

T = TypeVar("T")

# The first server-side embedding loads the model (seconds), so reads wait that long.
READ_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 0.5


@dataclass(frozen=True, slots=True)
class CacheHit:
    """A stored answer returned by AI.SEMANTIC_CACHE GET."""

    response: dict[str, Any]
    similarity: float
    entry_id: int
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LookupReply:
    """What one lookup learned: the hit, the best similarity seen, the query vector."""

    hit: CacheHit | None = None
    best_similarity: float | None = None
    vector: np.ndarray | None = None


class SemanticCacheClient:
    """Async AI.SEMANTIC_CACHE client that degrades to "cache down" instead of failing."""

    def __init__(self, host: str, port: int, password: str | None, cache_name: str,
                 retry_s: float = 1.0) -> None:
        self._redis = aioredis.Redis(host=host, port=port, password=password,
                                     socket_timeout=READ_TIMEOUT_S,
                                     socket_connect_timeout=CONNECT_TIMEOUT_S,
                                     retry=Retry(NoBackoff(), 0))
        self.cache_name = cache_name
        self._retry_s = retry_s
        self._down_since: float | None = None
        self._last_try = 0.0
        self.last_error = ""

    @property
    def available(self) -> bool:
        return self._down_since is None

    async def ready(self) -> bool:
        """True when the server is (again) usable; retries at most every ``retry_s``."""
        if self._down_since is None:
            return True
        now = time.monotonic()
        if now - self._last_try < self._retry_s:
            return False
        self._last_try = now
        try:
            await self._redis.ping()
        except RedisError as exc:
            self.last_error = str(exc)
            return False
        self._down_since = None
        return True

    def _mark_down(self, exc: Exception) -> None:
        self.last_error = str(exc)
        if self._down_since is None:
            self._down_since = self._last_try = time.monotonic()

    async def probe(self) -> bool:
        """Ping now (ignoring the retry delay); True when the server answers."""
        self._last_try = 0.0
        if self._down_since is None:
            try:
                await self._redis.ping()
            except RedisError as exc:
                self._mark_down(exc)
        return await self.ready()

    async def _call(self, command: Command[T]) -> T:
        if not await self.ready():
            raise RedisConnectionError("pion-server is down")
        try:
            reply = await self._redis.execute_command(*command.args)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            self._mark_down(exc)
            raise RedisConnectionError(str(exc)) from exc
        return command.parse(reply)

    async def embed(self, text: str) -> str:
        """Run AI.EMBED once (loads the server's model): "ok", "down" or "refused"."""
        try:
            await self._call(commands.ai_embed(text))
        except RedisConnectionError as exc:
            self.last_error = str(exc)
            return "down"
        except RedisError as exc:
            self.last_error = str(exc)
            return "refused"
        return "ok"

    async def embed_vectors(self, texts: list[str]) -> np.ndarray | None:
        """AI.EMBED ``texts`` -> (n, dim) float32 rows, or None when the server cannot embed."""
        try:
            vectors = await self._call(commands.ai_embed(*texts))
            return np.stack(vectors)
        except (RedisError, ValueError, TypeError) as exc:
            self.last_error = str(exc)
            return None

    async def server_stats(self) -> dict[str, Any] | None:
        """PION.STATS of the connected pion-server as a dict (None when it is down)."""
        try:
            return await self._call(commands.pion_stats())
        except RedisError as exc:
            self.last_error = str(exc)
            return None

    async def get(self, scope: ScopeKey, text: str, threshold: float,
                  vector: np.ndarray | None = None) -> CacheHit | None:
        return (await self.lookup(scope, text, threshold, vector, want_vector=False)).hit

    async def lookup(self, scope: ScopeKey, text: str, threshold: float,
                     vector: np.ndarray | None = None, want_vector: bool = True) -> LookupReply:
        """One GET ... WITHBEST: the hit (or None), the best similarity in the scope even on
        a miss (None when the scope is empty or the server is down), and, with
        ``want_vector``, the query vector the server embedded.

        WITHBEST lets /metrics histogram the similarity of every lookup; WITHVECTOR lets
        the proxy store the answer after a miss (SET ... VECTOR) without embedding the same
        text a second time.
        """
        command = commands.semantic_get(self.cache_name, scope, text, threshold=threshold, vector=vector,
                                        with_vector=want_vector, with_best=True)
        try:
            found = await self._call(command)
        except RedisError as exc:
            self.last_error = str(exc)
            return LookupReply()
        except ValueError as exc:
            self.last_error = str(exc)
            return LookupReply()
        if found.hit is None:
            return LookupReply(None, found.best_similarity, found.vector)
        try:
            response = json.loads(found.hit.response)
            meta = json.loads(found.hit.meta) if found.hit.meta is not None else {}
        except ValueError as exc:
            self.last_error = f"malformed cache entry: {exc}"
            return LookupReply(None, found.best_similarity, found.vector)
        hit = CacheHit(response, found.hit.similarity, found.hit.entry_id, meta)
        return LookupReply(hit, found.best_similarity, found.vector)

    async def set(self, scope: ScopeKey, text: str, response: dict[str, Any], meta: dict[str, Any],
                  ttl_s: float | None, vector: np.ndarray | None = None) -> int | None:
        command = commands.semantic_set(self.cache_name, scope, text, json.dumps(response), meta=json.dumps(meta),
                                        ttl_s=ttl_s, vector=vector)
        try:
            return await self._call(command)
        except (RedisError, ValueError, TypeError) as exc:
            self.last_error = str(exc)
            return None

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        except (RedisError, OSError):
            pass

