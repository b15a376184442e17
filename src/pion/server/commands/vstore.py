"""V.* commands: V-store sessions of per-layer, per-token K/V rows.

  V.CREATE <sid> <kv_dim> [VQUANT <fmt> | SCHEMA <n_layers> <fmt_0> ... <fmt_{n-1}>]   -> +OK
  V.STOREBATCH <sid> <layer> <start_id> <blob> [DTYPE f32|f16|raw]                    -> :<rows in layer>
  V.FETCH <sid> <layer> RANGE <start_id> <end_id> [DTYPE f32|f16|raw]                 -> bulk
  V.FETCH <sid> <layer> <id> [<id> ...] [DTYPE f32|f16|raw]                           -> bulk (legacy)
  V.MFETCH <sid> <layer_from> <layer_to> RANGE <a> <b> [DTYPE f32|f16|raw]            -> array of bulk
  V.INFO <sid>  -> map      V.DROP <sid> [<sid> ...]  -> :<dropped>      V.LIST [pattern] -> array

Blobs are little-endian rows of ``kv_dim`` values ([N, H*D] layout). The default
V.CREATE format is fp32 (lossless). Fetch payload bytes count into the receipt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.common.errors import CommandError
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import (
    need_value, option, parse_dtype, parse_format, parse_int, syntax_error, wire_word, word,
)
from pion.server.errors import NOT_AN_INTEGER, SYNTAX_ERROR
from pion.server.resp.replies import OK
from pion.server.store.session import MAX_LAYERS
from pion.server.tenants import receipt_for, visible

if TYPE_CHECKING:
    from pion.server.context import CommandContext, ServerState

DEFAULT_FORMAT = "fp32"
FETCH_DTYPES = ("f32", "f16", "raw")
STORE_DTYPES = ("f32", "f16", "raw")
MAX_KV_DIM = 1 << 20


def parse_kv_dim(arg: bytes) -> int:
    return parse_int(arg, "kv_dim", 1, MAX_KV_DIM)


def parse_schema(args: list[bytes], i: int) -> tuple[tuple[str, ...], int]:
    """``SCHEMA <n> <fmt_0> ... <fmt_{n-1}>`` starting at ``args[i]``; returns (formats, next index)."""
    (n_arg,) = need_value(args, i, 1, "SCHEMA")
    n_layers = parse_int(n_arg, "n_layers", 1, MAX_LAYERS)
    formats = need_value(args, i + 1, n_layers, "SCHEMA")
    return tuple(parse_format(f) for f in formats), i + 2 + n_layers


def cmd_vstore_create(ctx: CommandContext, args: list[bytes]) -> object:
    sid, kv_dim = word(args[0]), parse_kv_dim(args[1])
    vquant: str | None = None
    schema: tuple[str, ...] | None = None
    i = 2
    while i < len(args):
        opt = option(args[i])
        if opt == "VQUANT":
            vquant = parse_format(need_value(args, i, 1, "VQUANT")[0])
            i += 2
        elif opt == "SCHEMA":
            schema, i = parse_schema(args, i)
        else:
            raise syntax_error(args[i])
    if vquant is not None and schema is not None:
        raise CommandError("VQUANT and SCHEMA are mutually exclusive (SCHEMA names every layer's format)")
    if schema is not None:
        ctx.server.stores.vstore.create_session(sid, kv_dim, schema, uniform=False)
    else:
        ctx.server.stores.vstore.create_session(sid, kv_dim, (vquant or DEFAULT_FORMAT,), uniform=True)
    return OK


def parse_trailing_dtype(args: list[bytes], n_fixed: int, allowed: tuple[str, ...]) -> str:
    """An optional ``DTYPE <x>`` after ``n_fixed`` words, and nothing else."""
    if len(args) == n_fixed:
        return "f32"
    if option(args[n_fixed]) != "DTYPE":
        raise syntax_error(args[n_fixed])
    if len(args) != n_fixed + 2:
        raise CommandError("DTYPE needs 1 value" if len(args) == n_fixed + 1 else SYNTAX_ERROR)
    return parse_dtype(args[n_fixed + 1], allowed)


def cmd_vstore_storebatch(ctx: CommandContext, args: list[bytes]) -> object:
    sid = word(args[0])
    layer = parse_int(args[1], "layer", 0, MAX_LAYERS - 1)
    start_id = parse_int(args[2], "start_id", 0, 2**32 - 1)
    dtype = parse_trailing_dtype(args, 4, STORE_DTYPES)
    return ctx.server.stores.vstore.store_rows(sid, layer, start_id, args[3], dtype)


def _served(ctx: CommandContext, n_bytes: int) -> None:
    receipt_for(ctx).record_bytes_served(n_bytes)


def cmd_vstore_fetch(ctx: CommandContext, args: list[bytes]) -> object:
    sid = word(args[0])
    layer = parse_int(args[1], "layer", 0, MAX_LAYERS - 1)
    store = ctx.server.stores.vstore
    if option(args[2]) == "RANGE":
        if len(args) < 5:
            raise CommandError("RANGE needs 2 values")
        start_id = parse_int(args[3], "start_id")
        end_id = parse_int(args[4], "end_id")
        dtype = parse_trailing_dtype(args, 5, FETCH_DTYPES)
        payload = store.fetch(sid, layer, start_id, end_id, dtype)
    else:
        id_args = args[2:]
        dtype = "f32"
        if len(id_args) >= 2 and option(id_args[-2]) == "DTYPE":
            dtype = parse_dtype(id_args[-1], FETCH_DTYPES)
            id_args = id_args[:-2]
        if not id_args:
            raise CommandError("V.FETCH needs RANGE <start_id> <end_id> or at least one token id")
        try:
            ids = [parse_int(a, "token id") for a in id_args]
        except CommandError:
            raise CommandError(f"{NOT_AN_INTEGER} (token id; or use RANGE <start_id> <end_id>)") from None
        payload = store.fetch_ids(sid, layer, ids, dtype)
    _served(ctx, payload.nbytes)
    return payload


def cmd_vstore_mfetch(ctx: CommandContext, args: list[bytes]) -> object:
    sid = word(args[0])
    layer_from = parse_int(args[1], "layer_from", 0, MAX_LAYERS)
    layer_to = parse_int(args[2], "layer_to", 0, MAX_LAYERS)
    if option(args[3]) != "RANGE":
        raise syntax_error(args[3])
    start_id = parse_int(args[4], "start_id")
    end_id = parse_int(args[5], "end_id")
    dtype = parse_trailing_dtype(args, 6, FETCH_DTYPES)
    payloads = ctx.server.stores.vstore.mfetch(sid, layer_from, layer_to, start_id, end_id, dtype)
    _served(ctx, sum(p.nbytes for p in payloads))
    return payloads


def cmd_vstore_info(ctx: CommandContext, args: list[bytes]) -> object:
    store = ctx.server.stores.vstore
    session = store.get(word(args[0]))
    if session is None:
        raise CommandError(f"session '{word(args[0])}' not found")
    n_layers = session.n_layers_declared or (max(session.layers, default=-1) + 1)
    return {
        "sid": wire_word(session.sid),
        "kv_dim": session.kv_dim,
        "format": session.format_label,
        "schema": [] if session.uniform else list(session.formats),
        "layers": sum(1 for buf in session.layers.values() if buf.n_rows),
        "tokens": session.rows_in(0),
        "rows": [session.rows_in(layer) for layer in range(n_layers)],
        "bytes": session.nbytes,
        "allocated_bytes": session.allocated_bytes,
        "fetches": session.n_fetches,
    }


def cmd_vstore_drop(ctx: CommandContext, args: list[bytes]) -> object:
    return ctx.server.stores.vstore.drop([word(a) for a in args])


def cmd_vstore_list(ctx: CommandContext, args: list[bytes]) -> object:
    if len(args) > 1:
        raise syntax_error(args[1])
    pattern = word(args[0]) if args else None
    sids = [wire_word(sid) for sid in ctx.server.stores.vstore.sids(pattern)]
    return sids if ctx.client.tenant is None else [s for s in sids if visible(ctx, s)]


def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    store = state.stores.vstore
    return {"Memory": [("vstore_bytes", store.nbytes), ("vstore_allocated_bytes", store.allocated_bytes),
                       ("vstore_sessions", len(store)), ("vstore_evicted_sessions", store.evicted_sessions)]}


_W = frozenset({"write"})
_R = frozenset({"readonly"})
COMMANDS: list[CommandSpec] = [
    CommandSpec("V.CREATE", -3, cmd_vstore_create, _W, "create a V-store session"),
    CommandSpec("V.STOREBATCH", -5, cmd_vstore_storebatch, _W, "store rows of one layer"),
    CommandSpec("V.FETCH", -4, cmd_vstore_fetch, _R, "fetch rows of one layer"),
    CommandSpec("V.MFETCH", -7, cmd_vstore_mfetch, _R, "fetch a row range of several layers"),
    CommandSpec("V.INFO", 2, cmd_vstore_info, _R, "describe a session"),
    CommandSpec("V.DROP", -2, cmd_vstore_drop, _W, "drop sessions"),
    CommandSpec("V.LIST", -1, cmd_vstore_list, _R, "list session ids"),
]
