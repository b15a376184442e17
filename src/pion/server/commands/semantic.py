"""AI.EMBED and AI.SEMANTIC_CACHE: the server side of pion-serve's L1 cache.

    AI.EMBED <text> [<text> ...]
        -> one 384-dim float32 little-endian blob (1536 bytes) per text
    AI.SEMANTIC_CACHE SET <cache> <scope> <text> <response> [TTL <s>] [VECTOR <blob>] [META <json>]
        -> integer entry id
    AI.SEMANTIC_CACHE GET <cache> <scope> <text> [THRESHOLD <t>] [VECTOR <blob>] [WITHVECTOR] [WITHBEST]
        -> [response, similarity, id, meta] or nil (below threshold / empty scope)
        WITHVECTOR: always [response, similarity, id, meta, vector] (the first four nil on a
        miss; vector = the unit-norm fp32 query vector), so a client that stores the answer
        after a miss passes it back with SET ... VECTOR and the text is embedded only once.
        WITHBEST: a miss replies [nil, best, nil, nil] instead of nil, best = the highest
        similarity in the scope (below the threshold; nil when the scope is empty), so a
        client can histogram the similarity of every lookup. With WITHVECTOR too:
        [nil, best, nil, nil, vector].
    AI.SEMANTIC_CACHE DEL <cache> <id> [<id> ...]   -> number removed
    AI.SEMANTIC_CACHE FLUSH <cache>                 -> number removed
    AI.SEMANTIC_CACHE INFO <cache>                  -> map of counters

Example: ``AI.SEMANTIC_CACHE GET faq s1 "how do I reset my password" THRESHOLD 0.9``
-> ``["Click 'Forgot password'...", "0.9917", 7, "{\"q\": ...}"]``.

Without VECTOR the server embeds ``text`` itself (all-MiniLM-L6-v2 on a worker thread).
A VECTOR blob is any float32 little-endian vector; it is normalised, and every vector of
one scope must have the same dimension. GET outcomes are counted in PION.STATS
(semantic_hits / semantic_misses) through the store's receipt.

With persistence running (always, in pion-server) SET/DEL/FLUSH and FLUSHALL are
logged to the WAL before they apply and included in snapshots (records ``SemanticSet`` ...
in ``server/store/records.py``); the stored vector is logged, so a restart never re-embeds. INFO's
``persisted`` is 1 then.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import numpy as np

from pion.common.errors import CommandError, arity_error, clip_for_echo
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import I64_MAX, I64_MIN, parse_float, parse_int
from pion.server.context import CommandContext, ServerState
from pion.server.semantic.cache import DEFAULT_THRESHOLD
from pion.server.slowlog import exclude_from_slowlog
from pion.server.tenants import receipt_for

MAX_EMBED_TEXTS = 256


def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    """The INFO ``# Semantic`` section (selected case-insensitively, like every INFO section)."""
    store = state.stores.semantic
    embedder = state.embedder
    return {"Semantic": [
        ("semantic_caches", store.n_caches),
        ("semantic_entries", len(store)),
        ("semantic_persisted", int(store.persisted)),
        ("embedder_model", "all-MiniLM-L6-v2"),
        ("embedder_loaded", int(embedder.loaded)),
        ("embedder_texts", embedder.texts_embedded),
        ("embedder_load_ms", round(embedder.load_s * 1000.0, 3)),  # start-up work, kept out of SLOWLOG
    ]}


def _text(arg: bytes, what: str) -> str:
    try:
        text = arg.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError(f"{what} is not valid UTF-8") from None
    if not text.strip():
        raise CommandError(f"{what} must not be empty")
    return text


async def _embed(ctx: CommandContext, texts: list[str]) -> np.ndarray:
    embedder = ctx.server.embedder
    loaded_before = embedder.loaded
    try:
        vecs = await embedder.embed(texts)
        if not loaded_before:  # the model loaded while we waited: start-up work, not this command
            exclude_from_slowlog(embedder.load_s)
        return vecs
    except Exception as exc:  # model missing or broken: the client gets a clear error
        raise CommandError(f"embedding model failed: {clip_for_echo(str(exc))}") from exc


def _vector_blob(blob: bytes) -> np.ndarray:
    if len(blob) == 0 or len(blob) % 4:
        raise CommandError(f"VECTOR blob must be float32 little-endian (got {len(blob)} bytes)")
    vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(vec)):
        raise CommandError("VECTOR contains NaN or infinity")
    norm = float(np.linalg.norm(vec))
    if norm == 0.0:
        raise CommandError("VECTOR must not be all zeros")
    return vec / norm


def _options(args: list[bytes], allowed: set[str]) -> dict[str, bytes]:
    opts: dict[str, bytes] = {}
    i = 0
    while i < len(args):
        name = args[i].decode("utf-8", "replace").upper()
        if name not in allowed:
            raise CommandError(f"unknown option '{clip_for_echo(args[i])}'")
        if i + 1 >= len(args):
            raise CommandError(f"option {name} needs a value")
        if name in opts:
            raise CommandError(f"option {name} given twice")
        opts[name] = args[i + 1]
        i += 2
    return opts


async def cmd_semantic_embed(ctx: CommandContext, args: list[bytes]) -> list[bytes]:
    if len(args) > MAX_EMBED_TEXTS:
        raise CommandError(f"AI.EMBED takes at most {MAX_EMBED_TEXTS} texts per call")
    texts = [_text(a, "text") for a in args]
    vecs = await _embed(ctx, texts)
    return [row.astype("<f4").tobytes() for row in vecs]


async def _query_vector(ctx: CommandContext, text: str, opts: dict[str, bytes]) -> np.ndarray:
    if "VECTOR" in opts:
        return _vector_blob(opts["VECTOR"])
    row: np.ndarray = (await _embed(ctx, [text]))[0]
    return row


async def cmd_semantic_set(ctx: CommandContext, args: list[bytes]) -> int:
    if len(args) < 4:
        raise arity_error("ai.semantic_cache|set")
    cache, scope = _text(args[0], "cache name"), args[1].decode("utf-8", "replace")
    text, response = _text(args[2], "text"), bytes(args[3])
    opts = _options(args[4:], {"TTL", "VECTOR", "META"})
    ttl_s = None
    if "TTL" in opts:
        ttl_s = parse_float(opts["TTL"], "TTL")
        if ttl_s <= 0:
            raise CommandError("TTL must be a positive number of seconds")
    meta = opts.get("META")
    if meta is not None:
        try:
            json.loads(meta)
        except ValueError:
            raise CommandError("META must be valid JSON") from None
    store = ctx.server.stores.semantic
    vec = await _query_vector(ctx, text, opts)
    if (problem := store.check_dim(cache, scope, len(vec))) is not None:
        raise CommandError(problem)
    return store.put(cache, scope, text, response, vec, ttl_s, meta)


async def cmd_semantic_get(ctx: CommandContext, args: list[bytes]) -> list[Any] | None:
    if len(args) < 3:
        raise arity_error("ai.semantic_cache|get")
    cache, scope = _text(args[0], "cache name"), args[1].decode("utf-8", "replace")
    text = _text(args[2], "text")
    pairs: list[bytes] = []
    flags: set[bytes] = set()
    rest = args[3:]
    i = 0
    while i < len(rest):  # WITHVECTOR / WITHBEST are bare flags among NAME VALUE options
        if (flag := bytes(rest[i]).upper()) in (b"WITHVECTOR", b"WITHBEST"):
            if flag in flags:
                raise CommandError(f"option {flag.decode()} given twice")
            flags.add(flag)
            i += 1
            continue
        pairs += rest[i:i + 2]
        i += 2
    opts = _options(pairs, {"THRESHOLD", "VECTOR"})
    threshold = DEFAULT_THRESHOLD
    if "THRESHOLD" in opts:
        threshold = parse_float(opts["THRESHOLD"], "THRESHOLD")
        if not -1.0 <= threshold <= 1.0:
            raise CommandError("THRESHOLD must be between -1 and 1")
    store = ctx.server.stores.semantic
    vec = await _query_vector(ctx, text, opts)
    if (problem := store.check_dim(cache, scope, len(vec))) is not None:
        raise CommandError(problem)
    found, best = store.lookup_best(cache, scope, vec, threshold)
    receipt_for(ctx).record_semantic(found is not None)
    tail = [np.asarray(vec, dtype="<f4").tobytes()] if b"WITHVECTOR" in flags else []
    if found is None:
        score = round(best, 6) if best is not None and b"WITHBEST" in flags else None
        return [None, score, None, None, *tail] if flags else None
    entry, similarity = found
    return [entry.response, round(similarity, 6), entry.entry_id, entry.meta, *tail]


def cmd_semantic_del(ctx: CommandContext, args: list[bytes]) -> int:
    if len(args) < 2:
        raise arity_error("ai.semantic_cache|del")
    cache = _text(args[0], "cache name")
    ids = [parse_int(raw, "entry id", I64_MIN, I64_MAX) for raw in args[1:]]
    return ctx.server.stores.semantic.delete(cache, ids)


def cmd_semantic_flush(ctx: CommandContext, args: list[bytes]) -> int:
    if len(args) != 1:
        raise arity_error("ai.semantic_cache|flush")
    return ctx.server.stores.semantic.flush(_text(args[0], "cache name"))


def cmd_semantic_info(ctx: CommandContext, args: list[bytes]) -> dict[str, Any]:
    if len(args) != 1:
        raise arity_error("ai.semantic_cache|info")
    return ctx.server.stores.semantic.info(_text(args[0], "cache name"))


_VERBS = {"SET": cmd_semantic_set, "GET": cmd_semantic_get, "DEL": cmd_semantic_del,
          "FLUSH": cmd_semantic_flush, "INFO": cmd_semantic_info}


async def cmd_semantic_cache(ctx: CommandContext, args: list[bytes]) -> Any:
    verb = args[0].decode("utf-8", "replace").upper()
    handler = _VERBS.get(verb)
    if handler is None:
        raise CommandError(f"unknown AI.SEMANTIC_CACHE subcommand '{clip_for_echo(args[0])}'"
                           " (try SET, GET, DEL, FLUSH, INFO)")
    result = handler(ctx, args[1:])
    if inspect.isawaitable(result):
        result = await result
    return result


COMMANDS: list[CommandSpec] = [
    CommandSpec("AI.EMBED", -2, cmd_semantic_embed, frozenset({"readonly"}),
                "Embed texts with all-MiniLM-L6-v2 -> 384-dim float32 blobs"),
    # SET/DEL/FLUSH are writes (WAL-logged; under --appendfsync always their replies wait
    # for the fsync); GET and INFO are not.
    CommandSpec("AI.SEMANTIC_CACHE", -3, cmd_semantic_cache, frozenset(),
                "Semantic cache: SET / GET / DEL / FLUSH / INFO, partitioned by scope",
                write_subcommands=frozenset({"SET", "DEL", "FLUSH"})),
]
