"""KV.PREFIX.* commands: a prompt prefix as a pair of V-store sessions ``<ns>_pk`` / ``<ns>_pv``.

  KV.PREFIX.REGISTER <ns> <kv_dim> <fmt> [BLOCKS <block_size> <hash_count> <hash_blob>]
                     [LAYERS <n>] [PREFILL_MS <ms>] [ADMIT]                 -> +OK | +DEFERRED
  KV.PREFIX.REGISTER.SCHEMA <ns> <kv_dim> <n_layers> <k_fmt_0..n-1> <v_fmt_0..n-1>
                     [BLOCKS ...] [PREFILL_MS <ms>] [ADMIT]                 -> +OK | +DEFERRED
  KV.PREFIX.LOOKUP <ns> [TOKENS <n>] [PREFILL_MS <ms>]                               -> +HIT | +MISS
  KV.PREFIX.DROP <ns> [<ns> ...]                                                     -> :<dropped>
  KV.PREFIX.BLOCKS <ns>                     -> bulk [u32 block_size][u32 count][u64 hashes] | +UNKNOWN
  KV.PREFIX.MEMBERSHIP <ns> <hash_count> <hash_blob>     -> bulk ceil(K/8)-byte bitmap | +UNKNOWN
  KV.PREFIX.INFO                                         -> bulk "key:value" lines

Under ``--admission 2hit`` (server/admission.py) both REGISTER forms answer ``+DEFERRED`` the
first time a namespace is seen: nothing is created, the client prefills locally and stores
nothing; the next REGISTER of that namespace answers ``+OK``. ``ADMIT`` skips the policy: for
an explicit ingest (a RAG chunk pack) rather than a cache fill. A connection confined to a tenant
sees only its own prefixes in KV.PREFIX.INFO (server/tenants.py).

LAYERS (and REGISTER.SCHEMA, where it is implied) are Pion extensions (docs/design.md): LOOKUP then
answers +HIT only when both sides hold all n layers with the same token count, so
no reader restores a half-written prefix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.common.errors import CommandError
from pion.common.ids import k_session
from pion.server.commands.attend import attend_info_fields
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import (
    U32_MAX, need_value, option, parse_format, parse_int, parse_ms, syntax_error, wire_word, word,
)
from pion.server.commands.vstore import parse_kv_dim
from pion.server.resp.replies import OK, SimpleString
from pion.server.store.session import MAX_LAYERS
from pion.server.tenants import receipt_for

if TYPE_CHECKING:
    from pion.server.context import CommandContext, ServerState
    from pion.server.receipt import Receipt

DEFERRED = SimpleString("DEFERRED")
HIT = SimpleString("HIT")
MISS = SimpleString("MISS")
UNKNOWN = SimpleString("UNKNOWN")


def parse_hash_blob(count_arg: bytes, blob: bytes) -> bytes:
    """``<hash_count> <hash_blob>``: the blob must be exactly hash_count x 8 bytes."""
    count = parse_int(count_arg, "hash_count", 0, U32_MAX)
    if len(blob) != 8 * count:
        raise CommandError(f"hash_blob is {len(blob)} bytes, expected hash_count x 8 = {8 * count}")
    return blob


def parse_register_options(args: list[bytes], i: int, allow_layers: bool) -> dict[str, object]:
    """BLOCKS / LAYERS / PREFILL_MS from ``args[i:]``; -ERR on anything else or a missing value."""
    opts: dict[str, object] = {}
    while i < len(args):
        opt = option(args[i])
        if opt == "BLOCKS":
            size_arg, count_arg, blob = need_value(args, i, 3, "BLOCKS")
            opts["block_size"] = parse_int(size_arg, "block_size", 1, U32_MAX)
            opts["hashes"] = parse_hash_blob(count_arg, blob)
            i += 4
        elif opt == "LAYERS" and allow_layers:
            opts["layers"] = parse_int(need_value(args, i, 1, "LAYERS")[0], "LAYERS", 1, MAX_LAYERS)
            i += 2
        elif opt == "PREFILL_MS":
            opts["prefill_ms"] = parse_ms(need_value(args, i, 1, "PREFILL_MS")[0], "PREFILL_MS")
            i += 2
        elif opt == "ADMIT":  # bypass --admission 2hit (an explicit ingest, not a cache fill)
            opts["admit"] = True
            i += 1
        else:
            raise syntax_error(args[i])
    return opts


def cmd_kvprefix_register(ctx: CommandContext, args: list[bytes]) -> object:
    ns, kv_dim, fmt = word(args[0]), parse_kv_dim(args[1]), parse_format(args[2])
    opts = parse_register_options(args, 3, allow_layers=True)
    if not opts.pop("admit", False) and _deferred(ctx, ns):
        return DEFERRED
    ctx.server.stores.vstore.register_prefix(ns, kv_dim, (fmt,), (fmt,), True, **opts)  # type: ignore[arg-type]
    _admitted(ctx, ns)
    return OK


def _deferred(ctx: CommandContext, ns: str) -> bool:
    """The admission decision for a valid REGISTER (after parsing: bad input records nothing)."""
    admission = ctx.server.admission
    if admission is None or not admission.should_defer(ns, ctx.server.stores.vstore.prefix(ns) is not None):
        return False
    receipt_for(ctx).record_admission(True)
    return True


def _admitted(ctx: CommandContext, ns: str) -> None:
    if ctx.server.admission is not None:
        ctx.server.admission.admitted(ns)
    receipt_for(ctx).record_admission(False)


def cmd_kvprefix_register_schema(ctx: CommandContext, args: list[bytes]) -> object:
    ns, kv_dim = word(args[0]), parse_kv_dim(args[1])
    n_layers = parse_int(args[2], "n_layers", 1, MAX_LAYERS)
    if len(args) < 3 + 2 * n_layers:
        raise CommandError(f"REGISTER.SCHEMA with n_layers {n_layers} needs {2 * n_layers} formats "
                           f"(K then V), got {len(args) - 3}")
    formats = tuple(parse_format(a) for a in args[3:3 + 2 * n_layers])
    opts = parse_register_options(args, 3 + 2 * n_layers, allow_layers=False)
    if not opts.pop("admit", False) and _deferred(ctx, ns):
        return DEFERRED
    ctx.server.stores.vstore.register_prefix(ns, kv_dim, formats[:n_layers], formats[n_layers:], False,
                                          **opts)  # type: ignore[arg-type]
    _admitted(ctx, ns)
    return OK


def parse_lookup_options(args: list[bytes]) -> tuple[int | None, float | None]:
    """LOOKUP's ``[TOKENS <n>] [PREFILL_MS <ms>]`` after the namespace: (tokens, prefill_ms)."""
    tokens: int | None = None
    prefill_ms: float | None = None
    i = 1
    while i < len(args):
        opt = option(args[i])
        if opt == "TOKENS":
            tokens = parse_int(need_value(args, i, 1, "TOKENS")[0], "TOKENS", 0)
        elif opt == "PREFILL_MS":
            prefill_ms = parse_ms(need_value(args, i, 1, "PREFILL_MS")[0], "PREFILL_MS")
        else:
            raise syntax_error(args[i])
        i += 2
    return tokens, prefill_ms


def cmd_kvprefix_lookup(ctx: CommandContext, args: list[bytes]) -> object:
    ns = word(args[0])
    tokens, prefill_ms = parse_lookup_options(args)
    store = ctx.server.stores.vstore
    hit, k_tokens = store.lookup_prefix(ns)
    receipt = receipt_for(ctx)
    if not hit:
        receipt.record_prefix_lookup(False)
        return MISS
    entry = store.prefix(ns)
    if prefill_ms is None and entry is not None:
        prefill_ms = entry.prefill_ms
    receipt.record_prefix_lookup(True, k_tokens if tokens is None else tokens, prefill_ms)
    return HIT


def cmd_kvprefix_drop(ctx: CommandContext, args: list[bytes]) -> object:
    return ctx.server.stores.vstore.drop_prefixes([word(a) for a in args])


def cmd_kvprefix_blocks(ctx: CommandContext, args: list[bytes]) -> object:
    entry = ctx.server.stores.vstore.prefix(word(args[0]))
    if entry is None or entry.blocks is None:
        return UNKNOWN
    return entry.blocks.wire()


def cmd_kvprefix_membership(ctx: CommandContext, args: list[bytes]) -> object:
    probes = parse_hash_blob(args[1], args[2])
    entry = ctx.server.stores.vstore.prefix(word(args[0]))
    if entry is None or entry.blocks is None:
        return UNKNOWN
    return entry.blocks.membership(probes)


def prefix_info_fields(state: ServerState) -> list[tuple[str, int]]:
    from pion.server.commands.ssm import ssm_info_fields  # the SSM family's lines

    store = state.stores.vstore
    prefixes = list(store.iter_prefixes())
    total_tokens = 0
    for entry in prefixes:
        k_side = store.get(k_session(entry.ns))
        total_tokens += 0 if k_side is None else k_side.rows_in(0)
    wal_bytes = state.persist.wal_bytes
    return [
        ("registered_prefixes", len(prefixes)),
        ("total_prefix_tokens", total_tokens),
        ("vstore_sessions", len(store)),
        ("vstore_total_fetches", store.total_fetches),
        ("vstore_bytes", store.nbytes),
        ("wal_bytes", wal_bytes),
        ("vstore_allocated_bytes", store.allocated_bytes),
        ("vstore_evicted_sessions", store.evicted_sessions),
        *ssm_info_fields(state),
        *attend_info_fields(state),
    ]


def admission_info_fields(state: ServerState, receipt: Receipt) -> list[tuple[str, object]]:
    """The --admission lines of KV.PREFIX.INFO (counts from ``receipt``: the tenant's own)."""
    admission = state.admission  # every value is an integer, as KV.PREFIX.INFO's readers expect
    two_hit = admission is not None and admission.two_hit
    fields: list[tuple[str, object]] = [("admission_2hit", int(two_hit)), *receipt.admission_snapshot().items()]
    if admission is not None and two_hit:
        fields += [("admission_ghost_entries", admission.ghost_entries),
                   ("admission_ghost_evictions", admission.ghost_evictions)]
    return fields


def tenant_info_fields(state: ServerState, prefix: bytes) -> list[tuple[str, int]]:
    """KV.PREFIX.INFO's totals over one tenant's namespaces and sessions only."""
    store = state.stores.vstore
    prefixes = [e for e in store.iter_prefixes() if wire_word(e.ns).startswith(prefix)]
    total_tokens = 0
    for entry in prefixes:
        k_side = store.get(k_session(entry.ns))
        total_tokens += 0 if k_side is None else k_side.rows_in(0)
    sids = [sid for sid in store.sids(None) if wire_word(sid).startswith(prefix)]
    nbytes = 0
    for sid in sids:
        session = store.get(sid)
        nbytes += 0 if session is None else session.nbytes
    return [("registered_prefixes", len(prefixes)), ("total_prefix_tokens", total_tokens),
            ("vstore_sessions", len(sids)), ("vstore_bytes", nbytes)]


def cmd_kvprefix_info(ctx: CommandContext, args: list[bytes]) -> object:
    tenant = ctx.client.tenant
    fields: list[tuple[str, object]] = list(
        prefix_info_fields(ctx.server) if tenant is None else tenant_info_fields(ctx.server, tenant.prefix))
    fields += admission_info_fields(ctx.server, receipt_for(ctx))
    return "".join(f"{key}:{value}\r\n" for key, value in fields).encode()


_W = frozenset({"write"})
_R = frozenset({"readonly"})
COMMANDS: list[CommandSpec] = [
    CommandSpec("KV.PREFIX.REGISTER", -4, cmd_kvprefix_register, _W, "register a K/V prefix"),
    CommandSpec("KV.PREFIX.REGISTER.SCHEMA", -6, cmd_kvprefix_register_schema, _W,
                "register a K/V prefix with per-layer formats"),
    CommandSpec("KV.PREFIX.LOOKUP", -2, cmd_kvprefix_lookup, _R, "is this prefix held? (+HIT/+MISS)"),
    CommandSpec("KV.PREFIX.DROP", -2, cmd_kvprefix_drop, _W, "drop prefixes"),
    CommandSpec("KV.PREFIX.BLOCKS", 2, cmd_kvprefix_blocks, _R, "a prefix's block hash table"),
    CommandSpec("KV.PREFIX.MEMBERSHIP", 4, cmd_kvprefix_membership, _R, "which probe hashes are registered"),
    CommandSpec("KV.PREFIX.INFO", 1, cmd_kvprefix_info, _R, "prefix and V-store totals"),
]
