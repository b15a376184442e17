"""Vector and full-text search: the RediSearch FT.* commands redis-py's ``r.ft()`` sends.

  FT.CREATE <idx> [ON HASH] [PREFIX n p...] ... SCHEMA <field> TEXT|TAG|NUMERIC|VECTOR ...  -> +OK
  FT.DROPINDEX <idx> [DD]          -> +OK   (DD also deletes the indexed hashes)
  FT.INFO <idx>                    -> map   (index_name, index_definition, attributes, num_docs...)
  FT._LIST                         -> array of index names
  FT.SEARCH <idx> <query> [options]                          -> RediSearch's reply shape
  FT.HYBRID <idx> SEARCH <query> VSIM @<vec> <blob|$p> ...   -> text + vector, RRF-fused

Documents are hashes (``commands/hashes.py``) under the index's prefixes; the indexes
follow every write through ``Keyspace.watchers`` (``pion.server.search.store``).
Query language: ``pion.server.search.query``; options: ``pion.server.search.options``;
FT.HYBRID: ``pion.server.search.hybrid``. Every FT.SEARCH / FT.HYBRID answered counts
one ``vector_queries`` in PION.STATS. Syntax and replies are documented in docs/protocol.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pion.common.errors import CommandError, clip_for_echo
from pion.server.commands.spec import CommandSpec
from pion.server.context import CommandContext, ServerState
from pion.server.resp.replies import OK
from pion.server.search.hybrid import run_hybrid
from pion.server.search.index import Hit, SearchIndex
from pion.server.search.options import SearchOptions, parse_options
from pion.server.search.query import AndNode, NumericNode, Query, parse_query
from pion.server.search.replies import format_distance, info_reply, search_reply
from pion.server.store.keyspace import Keyspace
from pion.server.tenants import receipt_for


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def cmd_search_create(ctx: CommandContext, args: list[bytes]) -> Any:
    ctx.server.stores.search.create(_name(args[0]), args[1:])
    return OK


def cmd_search_dropindex(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) > 2 or (len(args) == 2 and args[1].upper() != b"DD"):
        raise CommandError(f"Unknown argument `{clip_for_echo(args[-1])}`")
    store = ctx.server.stores.search
    index = store.drop(_name(args[0]))
    if len(args) == 2 and index.doc_of:
        store.keyspace.delete(list(index.doc_of))
    return OK


def cmd_search_info(ctx: CommandContext, args: list[bytes]) -> Any:
    store = ctx.server.stores.search
    index = store.indexes.get(_name(args[0]))
    if index is None:
        raise CommandError("Unknown index name")
    return info_reply(index, store.build_seconds.get(index.name, 0.0))


def cmd_search_list(ctx: CommandContext, args: list[bytes]) -> Any:
    return list(ctx.server.stores.search.indexes)


def _sort_key(index: SearchIndex, ks: Keyspace, field: str,
              score_field: str | None) -> Callable[[Hit], tuple[int, Any]]:
    """SORTBY's key: (0, value) for a doc with the field, (1, 0) without (sorted last)."""
    spec = index.definition.field(field)
    numeric = spec is not None and spec.kind == "NUMERIC"
    hash_field = (spec.name if spec is not None else field).encode("utf-8", "surrogateescape")

    def key(hit: Hit) -> tuple[int, Any]:
        if field == score_field:
            return (0, hit.score)
        raw = (ks.get_hash(hit.key) or {}).get(hash_field)
        if raw is None:
            return (1, 0)
        if numeric:
            try:
                return (0, float(raw))
            except ValueError:
                return (1, 0)
        return (0, raw)
    return key


def _apply_filters(text: str, opts: SearchOptions) -> Query:
    query = parse_query(text, opts.params)
    if not opts.filters:
        return query
    extra = tuple(NumericNode(name, lo, hi, lo_ex, hi_ex) for name, lo, hi, lo_ex, hi_ex in opts.filters)
    return Query(AndNode((query.filter, *extra)), query.knn)


def cmd_search_search(ctx: CommandContext, args: list[bytes]) -> Any:
    store = ctx.server.stores.search
    index = store.get(_name(args[0]))
    opts = parse_options(args[2:])
    query = _apply_filters(_name(args[1]), opts)
    store.keyspace.expire_due()
    hits = index.search(query)
    if opts.in_keys is not None:
        hits = [h for h in hits if h.key in opts.in_keys]
    score_field = None
    if query.knn is not None:
        score_field = query.knn.alias or f"__{query.knn.field}_score"
    if opts.sort_by is not None:
        if (opts.sort_by != score_field and index.definition.field(opts.sort_by) is None):
            raise CommandError(f"Property `{clip_for_echo(opts.sort_by)}` not loaded nor in schema")
        keyf = _sort_key(index, store.keyspace, opts.sort_by, score_field)
        present = [h for h in hits if keyf(h)[0] == 0]
        missing = [h for h in hits if keyf(h)[0] != 0]
        hits = sorted(present, key=lambda h: keyf(h)[1], reverse=opts.sort_desc) + missing
    receipt_for(ctx).record_vector_query()
    page = hits[opts.offset:opts.offset + opts.num]
    rows = []
    for hit in page:
        fields: dict[bytes, bytes] = {}
        if not opts.no_content:
            if score_field is not None:
                fields[score_field.encode()] = format_distance(hit.score).encode()
            fields.update(store.keyspace.get_hash(hit.key) or {})
            if opts.return_fields is not None:
                fields = _returned(index, fields, opts.return_fields)
        rows.append((hit, fields))
    return search_reply(len(hits), rows, ctx.client.protocol, opts.no_content or opts.return_fields == [],
                        opts.with_scores)


def _returned(index: SearchIndex, fields: dict[bytes, bytes],
              wanted: list[tuple[str, str]]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for name, alias in wanted:
        spec = index.definition.field(name)
        source = (spec.name if spec is not None else name).encode("utf-8", "surrogateescape")
        value = fields.get(source, fields.get(name.encode("utf-8", "surrogateescape")))
        if value is not None:
            out[alias.encode("utf-8", "surrogateescape")] = value
    return out


def cmd_search_hybrid(ctx: CommandContext, args: list[bytes]) -> Any:
    store = ctx.server.stores.search
    index = store.get(_name(args[0]))
    store.keyspace.expire_due()
    reply = run_hybrid(index, store.keyspace, args[1:])
    receipt_for(ctx).record_vector_query()
    return reply


# RedisVL and LangChain's Redis store check MODULE LIST for RediSearch >= 2.6 before using FT.*.
SEARCH_MODULE = {"name": "search", "ver": 21005, "path": "", "args": []}


def cmd_search_module(ctx: CommandContext, args: list[bytes]) -> Any:
    if args[0].upper() == b"LIST" and len(args) == 1:
        return [SEARCH_MODULE]
    if args[0].upper() in (b"LOAD", b"LOADEX", b"UNLOAD"):
        raise CommandError("MODULE LOAD/UNLOAD is not supported: Pion's modules are built in")
    raise CommandError(f"unknown subcommand or wrong number of arguments for '{clip_for_echo(args[0])}'. "
                       "Try MODULE HELP.")


# ---- family hooks ---------------------------------------------------------------------------
def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    store = state.stores.search
    return {"Search": [("search_number_of_indexes", len(store.indexes)),
                       ("search_total_docs", sum(len(i) for i in store.indexes.values()))]}


_W = frozenset({"write"})
_R = frozenset({"readonly"})
COMMANDS: list[CommandSpec] = [
    CommandSpec("FT.CREATE", -5, cmd_search_create, _W, "Create a search index over hashes"),
    CommandSpec("FT.DROPINDEX", -2, cmd_search_dropindex, _W, "Drop a search index (DD: and its hashes)"),
    CommandSpec("FT.INFO", 2, cmd_search_info, _R, "Definition and statistics of a search index"),
    CommandSpec("FT._LIST", 1, cmd_search_list, _R, "Names of every search index"),
    CommandSpec("FT.SEARCH", -3, cmd_search_search, _R, "Query an index: text, tags, ranges, KNN"),
    CommandSpec("FT.HYBRID", -5, cmd_search_hybrid, _R, "Text + vector search fused by reciprocal rank"),
    CommandSpec("MODULE", -2, cmd_search_module, frozenset({"admin"}),
                "MODULE LIST: the built-in search module (what RedisVL checks)"),
]
