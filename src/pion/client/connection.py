"""PionClient: typed methods for Pion's KV commands over redis-py (hiredis parser).

redis-py does all of the RESP work; this module only spells commands and shapes replies, so a
caller never builds argument lists by hand. It speaks RESP2 by default: bulk replies arrive as
``bytes`` with no per-reply type wrapping, which is what the multi-megabyte V.MFETCH restores want.

Retries are off by default: a prompt cache treats a failed command as "prefill locally" rather
than waiting through redis-py's backoff, so the caller sees the error at once and decides.

Method roles:
  * prefix directory: ``kv_prefix_register``, ``kv_prefix_register_schema``, ``kv_prefix_lookup``,
    ``kv_prefix_drop``, ``kv_prefix_blocks``, ``kv_prefix_membership``, ``kv_prefix_info``
  * rows: ``v_storebatch``, ``v_fetch``, ``v_mfetch``, ``v_info``
  * receipt: ``pion_stats``, ``pion_stats_reset``
  * batching: ``pipeline()`` returns a ``PionPipeline`` with the same command methods, queued.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from pion.client.block_hashes import BlockTable, pack_hashes, unpack_bitmap, unpack_blocks_reply
from pion.common.ids import Namespace, SessionId
from pion.common.ports import DEFAULT_HOST as _DEFAULT_HOST
from pion.common.ports import PION_SERVER_PORT

StoreDtype = Literal["f32", "f16"]
FetchDtype = Literal["f32", "f16", "raw"]
Blob = bytes | bytearray | memoryview

DEFAULT_HOST = _DEFAULT_HOST
DEFAULT_PORT = PION_SERVER_PORT


def _fmt_ms(ms: float) -> str:
    return f"{ms:.3f}"


class _Commands:
    """Argument spelling for each command; ``_call`` either runs it or queues it on a pipeline."""

    def _call(self, *args: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def kv_prefix_register(self, ns: Namespace | str, kv_dim: int, fmt: str, *, blocks: BlockTable | None = None,
                           layers: int | None = None, prefill_ms: float | None = None) -> Any:
        """``KV.PREFIX.REGISTER``: create ``<ns>_pk``/``<ns>_pv`` in one format (+OK)."""
        return self._call("KV.PREFIX.REGISTER", ns, kv_dim, fmt, *_options(blocks, layers, prefill_ms))

    def kv_prefix_register_schema(self, ns: Namespace | str, kv_dim: int, k_formats: Sequence[str],
                                  v_formats: Sequence[str], *, blocks: BlockTable | None = None,
                                  prefill_ms: float | None = None) -> Any:
        """``KV.PREFIX.REGISTER.SCHEMA``: one format per layer and side (heterogeneous prefix).

        The layer count is implied by the schema, so LOOKUP waits for all layers as with LAYERS n.
        """
        if len(k_formats) != len(v_formats) or not k_formats:
            raise ValueError("k_formats and v_formats need the same, non-zero number of layers")
        return self._call("KV.PREFIX.REGISTER.SCHEMA", ns, kv_dim, len(k_formats), *k_formats, *v_formats,
                          *_options(blocks, None, prefill_ms))

    def kv_prefix_lookup(self, ns: Namespace | str, *, tokens: int | None = None,
                         prefill_ms: float | None = None) -> Any:
        """``KV.PREFIX.LOOKUP`` → True for +HIT, False for +MISS."""
        args: list[Any] = ["KV.PREFIX.LOOKUP", ns]
        if tokens is not None:
            args += ["TOKENS", tokens]
        if prefill_ms is not None:
            args += ["PREFILL_MS", _fmt_ms(prefill_ms)]
        return self._call(*args)

    def kv_prefix_drop(self, *namespaces: Namespace | str) -> Any:
        """``KV.PREFIX.DROP`` → number of prefixes dropped."""
        return self._call("KV.PREFIX.DROP", *namespaces)

    def kv_prefix_blocks(self, ns: Namespace | str) -> Any:
        """``KV.PREFIX.BLOCKS`` → the registered ``BlockTable``, or None (+UNKNOWN)."""
        return self._call("KV.PREFIX.BLOCKS", ns)

    def kv_prefix_membership(self, ns: Namespace | str, hashes: Sequence[int]) -> Any:
        """``KV.PREFIX.MEMBERSHIP`` → one bool per probe hash, or None (+UNKNOWN)."""
        return self._call("KV.PREFIX.MEMBERSHIP", ns, len(hashes), pack_hashes(hashes))

    def kv_prefix_info(self) -> Any:
        """``KV.PREFIX.INFO`` → dict of its ``key:value`` lines (ints where they parse)."""
        return self._call("KV.PREFIX.INFO")

    def v_storebatch(self, sid: SessionId | str, layer: int, start: int, blob: Blob,
                     dtype: StoreDtype = "f32") -> Any:
        """``V.STOREBATCH`` rows ``start..`` of one layer → rows now in the layer."""
        return self._call("V.STOREBATCH", sid, layer, start, blob, "DTYPE", dtype)

    def v_fetch(self, sid: SessionId | str, layer: int, start: int, end: int, dtype: FetchDtype = "f32") -> Any:
        """``V.FETCH … RANGE start end`` (end exclusive) → bytes."""
        return self._call("V.FETCH", sid, layer, "RANGE", start, end, "DTYPE", dtype)

    def v_mfetch(self, sid: SessionId | str, layer_from: int, layer_to: int, start: int, end: int,
                 dtype: FetchDtype = "f32") -> Any:
        """``V.MFETCH`` layers ``layer_from..layer_to-1`` in one reply → list of bytes, one per layer."""
        return self._call("V.MFETCH", sid, layer_from, layer_to, "RANGE", start, end, "DTYPE", dtype)

    def v_info(self, sid: SessionId | str) -> Any:
        """``V.INFO`` → its reply as a dict."""
        return self._call("V.INFO", sid)

    def pion_stats(self) -> Any:
        """``PION.STATS`` → dict of the 16 receipt fields."""
        return self._call("PION.STATS")

    def pion_stats_reset(self) -> Any:
        """``PION.STATS RESET``."""
        return self._call("PION.STATS", "RESET")


class PionClient(_Commands):
    """A connection to pion-server with typed KV commands.

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

    def _call(self, *args: Any) -> Any:
        return _parse_reply(args[0], args, self.redis.execute_command(*args))

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
        self._queued: list[tuple[Any, ...]] = []

    def _call(self, *args: Any) -> PionPipeline:
        self._pipe.execute_command(*args)
        self._queued.append(args)
        return self

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send everything queued; with ``raise_on_error=False`` failed commands come back as exceptions."""
        queued, self._queued = self._queued, []
        replies = self._pipe.execute(raise_on_error=raise_on_error)
        return [r if isinstance(r, Exception) else _parse_reply(args[0], args, r)
                for args, r in zip(queued, replies, strict=True)]

    def __len__(self) -> int:
        return len(self._queued)


def _options(blocks: BlockTable | None, layers: int | None, prefill_ms: float | None) -> list[Any]:
    opts: list[Any] = []
    if blocks is not None and blocks.hashes:
        opts += ["BLOCKS", blocks.block_size, len(blocks.hashes), blocks.blob()]
    if layers is not None:
        opts += ["LAYERS", layers]
    if prefill_ms is not None:
        opts += ["PREFILL_MS", _fmt_ms(prefill_ms)]
    return opts


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parse_reply(command: str, args: Sequence[Any], reply: Any) -> Any:
    """Shape one raw redis-py reply for the command that produced it."""
    if command == "KV.PREFIX.LOOKUP":
        return _text(reply) == "HIT"
    if command == "KV.PREFIX.BLOCKS":
        return None if _is_unknown(reply) else unpack_blocks_reply(bytes(reply))
    if command == "KV.PREFIX.MEMBERSHIP":
        return None if _is_unknown(reply) else unpack_bitmap(bytes(reply), int(args[2]))
    if command == "KV.PREFIX.INFO":
        return _parse_info_lines(_text(reply))
    if command in ("V.STOREBATCH", "KV.PREFIX.DROP"):
        return int(reply)
    if command == "V.MFETCH":
        return list(reply)
    if command in ("PION.STATS", "V.INFO") and not (len(args) > 1 and _text(args[1]).upper() == "RESET"):
        return _pairs(reply)
    return reply


def _is_unknown(reply: Any) -> bool:
    return reply is None or reply in (b"UNKNOWN", "UNKNOWN")


def _number(value: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


def _parse_info_lines(text: str) -> dict[str, int | float | str]:
    out: dict[str, int | float | str] = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            key, _, value = line.partition(":")
            out[key.strip()] = _number(value.strip())
    return out


def _pairs(reply: Any) -> dict[str, Any]:
    """A RESP3 map or a RESP2 flat [k, v, k, v, ...] array as a dict with str keys."""
    if isinstance(reply, dict):
        items: Iterable[tuple[Any, Any]] = reply.items()
    elif isinstance(reply, (list, tuple)):
        items = zip(reply[0::2], reply[1::2], strict=True)
    else:
        return _parse_info_lines(_text(reply))  # type: ignore[return-value]
    return {_text(k): _number(_text(v)) if isinstance(v, (bytes, str)) else v for k, v in items}
