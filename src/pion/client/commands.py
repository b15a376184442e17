"""How each Pion command is spelled and how its reply is shaped: one ``Command[T]`` per call.

A builder (``kv_prefix_lookup(ns, tokens=...)``) returns the argument list and the parser that turns
redis-py's raw reply into a typed value (``bool``). Nothing here touches a socket, so every
transport shares it: ``PionClient`` runs a command at once, ``PionPipeline`` queues it, and
pion-serve's asyncio connection awaits it (``await redis.execute_command(*cmd.args)`` then
``cmd.parse(reply)``). Replies are parsed for RESP2 (what ``PionClient`` speaks by default) and
RESP3 maps alike.

Roles:
  * prefix directory: ``kv_prefix_register``, ``kv_prefix_register_schema``, ``kv_prefix_lookup``,
    ``kv_prefix_drop``, ``kv_prefix_blocks``, ``kv_prefix_membership``, ``kv_prefix_info``
  * rows: ``v_storebatch``, ``v_fetch``, ``v_mfetch``, ``v_info``
  * recurrent state (hybrid / SSM models): ``ssm_prefix_store``, ``ssm_prefix_fetch``,
    ``ssm_prefix_mfetch``, ``ssm_prefix_drop``
  * keyspace (plain string keys beside the prefixes): ``key_get``, ``key_set``
  * receipt: ``pion_stats``, ``pion_stats_reset``
  * semantic cache (docs/protocol.md, AI.*): ``ai_embed``, ``semantic_get``, ``semantic_set``,
    ``semantic_del``, ``semantic_flush``, ``semantic_info``
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from pion.client.block_hashes import BlockTable, pack_hashes, unpack_bitmap, unpack_blocks_reply
from pion.common.ids import Namespace, SessionId

T = TypeVar("T")
StoreDtype = Literal["f32", "f16", "raw"]  # raw: rows already in the session's format
FetchDtype = Literal["f32", "f16", "raw"]
Blob = bytes | bytearray | memoryview
InfoValue = int | float | str


@dataclass(frozen=True, slots=True)
class Command(Generic[T]):
    """One command: its arguments and the parser of its raw reply."""

    args: tuple[Any, ...]
    parse: Callable[[Any], T]


@dataclass(frozen=True, slots=True)
class SemanticHit:
    """A stored answer that AI.SEMANTIC_CACHE GET returned."""

    response: bytes
    similarity: float
    entry_id: int
    meta: bytes | None


@dataclass(frozen=True, slots=True)
class SemanticLookup:
    """What one GET learned: the hit (or None), the best similarity in the scope even on a miss
    (WITHBEST; None when the scope is empty or not asked), the query vector (WITHVECTOR)."""

    hit: SemanticHit | None = None
    best_similarity: float | None = None
    vector: np.ndarray | None = None


# ---- reply parsers ----------------------------------------------------------------------------

def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ok(reply: Any) -> bool:
    return _text(reply) == "OK"


def _int(reply: Any) -> int:
    return int(reply)


def _bytes(reply: Any) -> bytes:
    return bytes(reply)


def _number(value: str) -> InfoValue:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


def _info_lines(reply: Any) -> dict[str, InfoValue]:
    out: dict[str, InfoValue] = {}
    for line in _text(reply).splitlines():
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
        return dict(_info_lines(reply))
    return {_text(k): _number(_text(v)) if isinstance(v, (bytes, str)) else v for k, v in items}


def _is_unknown(reply: Any) -> bool:
    return reply is None or reply in (b"UNKNOWN", "UNKNOWN")


def _fmt_ms(ms: float) -> str:
    return f"{ms:.3f}"


def _vector(blob: Any) -> np.ndarray:
    return np.frombuffer(bytes(blob), dtype="<f4").astype(np.float32)


# ---- prefix directory -------------------------------------------------------------------------

def _options(blocks: BlockTable | None, layers: int | None, prefill_ms: float | None,
             admit: bool = False) -> list[Any]:
    opts: list[Any] = ["ADMIT"] if admit else []
    if blocks is not None and blocks.hashes:
        opts += ["BLOCKS", blocks.block_size, len(blocks.hashes), blocks.blob()]
    if layers is not None:
        opts += ["LAYERS", layers]
    if prefill_ms is not None:
        opts += ["PREFILL_MS", _fmt_ms(prefill_ms)]
    return opts


def kv_prefix_register(ns: Namespace | str, kv_dim: int, fmt: str, *, blocks: BlockTable | None = None,
                       layers: int | None = None, prefill_ms: float | None = None,
                       admit: bool = False) -> Command[bool]:
    """``KV.PREFIX.REGISTER``: create ``<ns>_pk``/``<ns>_pv`` in one format → True (+OK), or
    False (+DEFERRED: a server under ``--admission 2hit`` saw the namespace for the first time and
    created nothing; store nothing, register again next time). ``admit`` sends ``ADMIT``: an
    explicit ingest the admission policy must not defer."""
    return Command(("KV.PREFIX.REGISTER", ns, kv_dim, fmt, *_options(blocks, layers, prefill_ms, admit)), _ok)


def kv_prefix_register_schema(ns: Namespace | str, kv_dim: int, k_formats: Sequence[str],
                              v_formats: Sequence[str], *, blocks: BlockTable | None = None,
                              prefill_ms: float | None = None, admit: bool = False) -> Command[bool]:
    """``KV.PREFIX.REGISTER.SCHEMA``: one format per layer and side (heterogeneous prefix) → True
    (+OK), or False (+DEFERRED, as for ``kv_prefix_register``).

    The layer count is implied by the schema, so LOOKUP waits for all layers as with LAYERS n.
    """
    if len(k_formats) != len(v_formats) or not k_formats:
        raise ValueError("k_formats and v_formats need the same, non-zero number of layers")
    return Command(("KV.PREFIX.REGISTER.SCHEMA", ns, kv_dim, len(k_formats), *k_formats, *v_formats,
                    *_options(blocks, None, prefill_ms, admit)), _ok)


def kv_prefix_lookup(ns: Namespace | str, *, tokens: int | None = None,
                     prefill_ms: float | None = None) -> Command[bool]:
    """``KV.PREFIX.LOOKUP`` → True for +HIT, False for +MISS."""
    args: list[Any] = ["KV.PREFIX.LOOKUP", ns]
    if tokens is not None:
        args += ["TOKENS", tokens]
    if prefill_ms is not None:
        args += ["PREFILL_MS", _fmt_ms(prefill_ms)]
    return Command(tuple(args), lambda reply: _text(reply) == "HIT")


def kv_prefix_drop(*namespaces: Namespace | str) -> Command[int]:
    """``KV.PREFIX.DROP`` → number of prefixes dropped."""
    return Command(("KV.PREFIX.DROP", *namespaces), _int)


def kv_prefix_blocks(ns: Namespace | str) -> Command[BlockTable | None]:
    """``KV.PREFIX.BLOCKS`` → the registered ``BlockTable``, or None (+UNKNOWN)."""
    return Command(("KV.PREFIX.BLOCKS", ns),
                   lambda reply: None if _is_unknown(reply) else unpack_blocks_reply(bytes(reply)))


def kv_prefix_membership(ns: Namespace | str, hashes: Sequence[int]) -> Command[list[bool] | None]:
    """``KV.PREFIX.MEMBERSHIP`` → one bool per probe hash, or None (+UNKNOWN)."""
    count = len(hashes)
    return Command(("KV.PREFIX.MEMBERSHIP", ns, count, pack_hashes(hashes)),
                   lambda reply: None if _is_unknown(reply) else unpack_bitmap(bytes(reply), count))


def kv_prefix_info() -> Command[dict[str, InfoValue]]:
    """``KV.PREFIX.INFO`` → its ``key:value`` lines (ints and floats where they parse)."""
    return Command(("KV.PREFIX.INFO",), _info_lines)


# ---- rows -------------------------------------------------------------------------------------

def v_storebatch(sid: SessionId | str, layer: int, start: int, blob: Blob,
                 dtype: StoreDtype = "f32") -> Command[int]:
    """``V.STOREBATCH`` rows ``start..`` of one layer → rows now in the layer."""
    return Command(("V.STOREBATCH", sid, layer, start, blob, "DTYPE", dtype), _int)


def v_fetch(sid: SessionId | str, layer: int, start: int, end: int, dtype: FetchDtype = "f32") -> Command[bytes]:
    """``V.FETCH … RANGE start end`` (end exclusive) → bytes."""
    return Command(("V.FETCH", sid, layer, "RANGE", start, end, "DTYPE", dtype), _bytes)


def v_mfetch(sid: SessionId | str, layer_from: int, layer_to: int, start: int, end: int,
             dtype: FetchDtype = "f32") -> Command[list[bytes]]:
    """``V.MFETCH`` layers ``layer_from..layer_to-1`` in one reply → one bytes per layer (not copied)."""
    return Command(("V.MFETCH", sid, layer_from, layer_to, "RANGE", start, end, "DTYPE", dtype), list)


def v_info(sid: SessionId | str) -> Command[dict[str, Any]]:
    """``V.INFO`` → its reply as a dict."""
    return Command(("V.INFO", sid), _pairs)


# ---- recurrent state -------------------------------------------------------------------------

def _optional_bytes(reply: Any) -> bytes | None:
    return None if reply is None else bytes(reply)


def ssm_prefix_store(ns: Namespace | str, layer: int, blob: Blob) -> Command[bool]:
    """``SSM.PREFIX.STORE``: one recurrent layer's state blob → True (+OK)."""
    return Command(("SSM.PREFIX.STORE", ns, layer, blob), _ok)


def ssm_prefix_fetch(ns: Namespace | str, layer: int) -> Command[bytes | None]:
    """``SSM.PREFIX.FETCH`` → the layer's state blob, or None when nothing is held."""
    return Command(("SSM.PREFIX.FETCH", ns, layer), _optional_bytes)


def ssm_prefix_mfetch(ns: Namespace | str, layer_start: int, n: int) -> Command[list[bytes | None]]:
    """``SSM.PREFIX.MFETCH`` → ``n`` blobs in one reply (None where a layer holds nothing)."""
    return Command(("SSM.PREFIX.MFETCH", ns, layer_start, n),
                   lambda reply: [_optional_bytes(blob) for blob in reply])


def ssm_prefix_drop(ns: Namespace | str, layer: int | None = None) -> Command[bool]:
    """``SSM.PREFIX.DROP``: one layer, or every layer when ``layer`` is None → True (+OK)."""
    return Command(("SSM.PREFIX.DROP", ns, *(() if layer is None else (layer,))), _ok)


# ---- keyspace ---------------------------------------------------------------------------------

def key_get(key: str) -> Command[bytes | None]:
    """``GET key`` → its value, or None when the key does not exist."""
    return Command(("GET", key), _optional_bytes)


def key_set(key: str, value: Blob | str) -> Command[bool]:
    """``SET key value`` → True (+OK)."""
    return Command(("SET", key, value), _ok)


# ---- receipt ----------------------------------------------------------------------------------

def pion_stats() -> Command[dict[str, Any]]:
    """``PION.STATS`` → the receipt fields."""
    return Command(("PION.STATS",), _pairs)


def pion_stats_reset() -> Command[bool]:
    """``PION.STATS RESET`` → True."""
    return Command(("PION.STATS", "RESET"), _ok)


# ---- semantic cache ---------------------------------------------------------------------------

def ai_embed(*texts: str) -> Command[list[np.ndarray]]:
    """``AI.EMBED`` → one unit-norm float32 vector per text (the server's MiniLM, [embed] extra)."""
    return Command(("AI.EMBED", *texts), lambda reply: [_vector(b) for b in reply])


def _similarity(value: Any) -> float | None:
    return None if value is None else float(value)


def _parse_lookup(reply: Any, with_vector: bool) -> SemanticLookup:
    """GET's reply: nil, [response, similarity, id, meta] or, with WITHBEST/WITHVECTOR, a miss as
    [nil, best, nil, nil] and the query vector appended. Raises ValueError for any other shape."""
    if reply is None:
        return SemanticLookup()
    try:
        vector = _vector(reply[4]) if with_vector else None
        best = _similarity(reply[1])
        if reply[0] is None:
            return SemanticLookup(None, best, vector)
        hit = SemanticHit(bytes(reply[0]), float(reply[1]), int(reply[2]),
                          None if reply[3] is None else bytes(reply[3]))
    except (IndexError, TypeError) as exc:
        raise ValueError(f"malformed AI.SEMANTIC_CACHE GET reply: {exc}") from exc
    return SemanticLookup(hit, best, vector)


def semantic_get(cache: str, scope: str, text: str, *, threshold: float | None = None,
                 vector: np.ndarray | None = None, with_vector: bool = False,
                 with_best: bool = False) -> Command[SemanticLookup]:
    """``AI.SEMANTIC_CACHE GET`` → a ``SemanticLookup`` (empty on a plain miss)."""
    args: list[Any] = ["AI.SEMANTIC_CACHE", "GET", cache, scope, text]
    if threshold is not None:
        args += ["THRESHOLD", repr(float(threshold))]
    if vector is not None:
        args += ["VECTOR", np.asarray(vector, dtype="<f4").tobytes()]
    if with_vector:
        args.append("WITHVECTOR")
    if with_best:
        args.append("WITHBEST")
    return Command(tuple(args), lambda reply: _parse_lookup(reply, with_vector))


def semantic_set(cache: str, scope: str, text: str, response: str | bytes, *, meta: str | bytes | None = None,
                 ttl_s: float | None = None, vector: np.ndarray | None = None) -> Command[int]:
    """``AI.SEMANTIC_CACHE SET`` → the new entry's id."""
    args: list[Any] = ["AI.SEMANTIC_CACHE", "SET", cache, scope, text, response]
    if meta is not None:
        args += ["META", meta]
    if ttl_s is not None:
        args += ["TTL", repr(float(ttl_s))]
    if vector is not None:
        args += ["VECTOR", np.asarray(vector, dtype="<f4").tobytes()]
    return Command(tuple(args), _int)


def semantic_del(cache: str, *entry_ids: int) -> Command[int]:
    """``AI.SEMANTIC_CACHE DEL`` → number of entries removed."""
    return Command(("AI.SEMANTIC_CACHE", "DEL", cache, *entry_ids), _int)


def semantic_flush(cache: str) -> Command[int]:
    """``AI.SEMANTIC_CACHE FLUSH`` → number of entries removed."""
    return Command(("AI.SEMANTIC_CACHE", "FLUSH", cache), _int)


def semantic_info(cache: str) -> Command[dict[str, Any]]:
    """``AI.SEMANTIC_CACHE INFO`` → its counters as a dict."""
    return Command(("AI.SEMANTIC_CACHE", "INFO", cache), _pairs)
