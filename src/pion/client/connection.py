"""PionClient: typed methods for Pion's commands over redis-py (hiredis parser).

redis-py does all of the RESP work; ``pion.client.commands`` spells each command and shapes its
reply, and this module runs them: ``PionClient.kv_prefix_lookup(ns)`` returns a ``bool`` at once,
``PionPipeline.kv_prefix_lookup(ns)`` queues the same command and ``execute()`` returns the shaped
replies in order. Each method is declared once (``_command``) and typed for both: mypy sees
``PionClient.v_mfetch(...) -> list[bytes]`` and ``PionPipeline.v_mfetch(...) -> PionPipeline``.
It speaks RESP2 by default: bulk replies arrive as ``bytes`` with no per-reply type wrapping, which
is what the multi-megabyte V.MFETCH restores want.

Retries are off by default: a prompt cache treats a failed command as "prefill locally" rather
than waiting through redis-py's backoff, so the caller sees the error at once and decides.

Method roles:
  * prefix directory: ``kv_prefix_register``, ``kv_prefix_register_schema``, ``kv_prefix_lookup``,
    ``kv_prefix_drop``, ``kv_prefix_blocks``, ``kv_prefix_membership``, ``kv_prefix_info``
  * rows: ``v_storebatch``, ``v_fetch``, ``v_mfetch``, ``v_info``
  * recurrent state: ``ssm_prefix_store``, ``ssm_prefix_fetch``, ``ssm_prefix_mfetch``, ``ssm_prefix_drop``
  * keyspace: ``key_get``, ``key_set``
  * receipt: ``pion_stats``, ``pion_stats_reset``
  * semantic cache: ``ai_embed``, ``semantic_get``, ``semantic_set``, ``semantic_del``,
    ``semantic_flush``, ``semantic_info``
  * batching: ``pipeline()`` returns a ``PionPipeline`` with the same command methods, queued.
  * ``-w N``: ``follow_redirect(error)`` moves the client to the worker a redirect names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pion.client import commands as cmd
from pion.client.commands import Blob, Command, FetchDtype, SemanticHit, SemanticLookup, StoreDtype
from pion.client.redirect import parse_redirect
from pion.common.ports import DEFAULT_HOST as _DEFAULT_HOST
from pion.common.ports import PION_SERVER_PORT

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "Blob", "FetchDtype", "PionClient", "PionPipeline", "SemanticHit",
           "SemanticLookup", "StoreDtype"]

DEFAULT_HOST = _DEFAULT_HOST
DEFAULT_PORT = PION_SERVER_PORT

P = ParamSpec("P")
T = TypeVar("T")


class _command(Generic[P, T]):  # used like a decorator-made method
    """A command method declared once: runs on a ``PionClient``, queues on a ``PionPipeline``."""

    def __init__(self, build: Callable[P, Command[T]]) -> None:
        self._build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, obj: PionClient, owner: type[Any] | None = None) -> Callable[P, T]: ...

    @overload
    def __get__(self, obj: PionPipeline, owner: type[Any] | None = None) -> Callable[P, PionPipeline]: ...

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> _command[P, T]: ...

    def __get__(self, obj: Any, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        build = self._build

        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return obj._run(build(*args, **kwargs))
        method.__doc__ = build.__doc__
        return method


class _Commands:
    """Every command, once; ``_run`` either runs it (client) or queues it (pipeline)."""

    def _run(self, command: Command[Any]) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    kv_prefix_register = _command(cmd.kv_prefix_register)
    kv_prefix_register_schema = _command(cmd.kv_prefix_register_schema)
    kv_prefix_lookup = _command(cmd.kv_prefix_lookup)
    kv_prefix_drop = _command(cmd.kv_prefix_drop)
    kv_prefix_blocks = _command(cmd.kv_prefix_blocks)
    kv_prefix_membership = _command(cmd.kv_prefix_membership)
    kv_prefix_info = _command(cmd.kv_prefix_info)
    v_storebatch = _command(cmd.v_storebatch)
    v_fetch = _command(cmd.v_fetch)
    v_mfetch = _command(cmd.v_mfetch)
    v_info = _command(cmd.v_info)
    ssm_prefix_store = _command(cmd.ssm_prefix_store)
    ssm_prefix_fetch = _command(cmd.ssm_prefix_fetch)
    ssm_prefix_mfetch = _command(cmd.ssm_prefix_mfetch)
    ssm_prefix_drop = _command(cmd.ssm_prefix_drop)
    key_get = _command(cmd.key_get)
    key_set = _command(cmd.key_set)
    pion_stats = _command(cmd.pion_stats)
    pion_stats_reset = _command(cmd.pion_stats_reset)
    ai_embed = _command(cmd.ai_embed)
    semantic_get = _command(cmd.semantic_get)
    semantic_set = _command(cmd.semantic_set)
    semantic_del = _command(cmd.semantic_del)
    semantic_flush = _command(cmd.semantic_flush)
    semantic_info = _command(cmd.semantic_info)


class PionClient(_Commands):
    """A connection to pion-server with typed commands.

    Args:
        host, port, password: where the server is (defaults: 127.0.0.1:1974, no password).
        protocol: RESP version; 2 (default) keeps bulk replies as plain bytes.
        socket_timeout_s: per-command read timeout; large restores finish far below the default.
        connect_timeout_s: how long to wait for a server that is not there.
        redis_client: use this redis-py client instead of opening one (its settings are kept).
    """

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, password: str | None = None, *,
                 protocol: int = 2, socket_timeout_s: float = 30.0, connect_timeout_s: float = 2.0,
                 redis_client: redis.Redis | None = None) -> None:
        self.redis = redis_client or redis.Redis(
            host=host, port=port, password=password, protocol=protocol, socket_timeout=socket_timeout_s,
            socket_connect_timeout=connect_timeout_s, retry=Retry(NoBackoff(), 0))

        self.redirects = 0  # times follow_redirect moved this client to another worker (-w N)

    def _run(self, command: Command[T]) -> T:
        return command.parse(self.redis.execute_command(*command.args))

    def follow_redirect(self, error: BaseException) -> bool:
        """When ``error`` says the session lives on another worker, reconnect there and return
        True (the caller retries once); False for any other error (``pion.client.redirect``)."""
        target = parse_redirect(error)
        if target is None:
            return False
        pool = self.redis.connection_pool
        kwargs = {**pool.connection_kwargs, "host": target.host, "port": target.port}
        moved = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))
        self.redis.close()
        self.redis = moved
        self.redirects += 1
        return True

    def ping(self) -> bool:
        """True when the server answers PING (raises redis.ConnectionError when it is not there)."""
        return bool(self.redis.ping())

    def pipeline(self) -> PionPipeline:
        """Queue commands and send them in one round trip (no MULTI/EXEC)."""
        return PionPipeline(self.redis.pipeline(transaction=False))

    def close(self) -> None:
        """Close the connection pool."""
        self.redis.close()

    def __enter__(self) -> PionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PionPipeline(_Commands):
    """Commands queued on a redis-py pipeline; ``execute()`` returns the shaped replies in order."""

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe
        self._queued: list[Command[Any]] = []

    def _run(self, command: Command[Any]) -> PionPipeline:
        self._pipe.execute_command(*command.args)
        self._queued.append(command)
        return self

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send everything queued; with ``raise_on_error=False`` failed commands come back as exceptions."""
        queued, self._queued = self._queued, []
        replies = self._pipe.execute(raise_on_error=raise_on_error)
        return [r if isinstance(r, Exception) else command.parse(r)
                for command, r in zip(queued, replies, strict=True)]

    def __len__(self) -> int:
        return len(self._queued)
