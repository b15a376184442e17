"""Cold-tier versions of the KV.PREFIX.* / V.STOREBATCH handlers, swapped in at start-up.

Only a server started with ``--cold-tier`` runs these: ``wrap_commands`` replaces seven
entries of the joined command table with ``async`` handlers that run the original (sync)
handler and then await the cold-tier step. The families' modules stay as they are, and a
server without a cold tier runs exactly the code it ran before.

  V.STOREBATCH              original, then write the layer through (or mark it for behind)
  KV.PREFIX.REGISTER(.SCHEMA) original, then write the index meta and any rows held
  KV.PREFIX.LOOKUP          on a warm miss: cold index (1 round trip), promote on a cold hit,
                            then the original answers (+HIT now, with the receipt credited)
  KV.PREFIX.BLOCKS / MEMBERSHIP  on a warm +UNKNOWN: the cold index's block table
  KV.PREFIX.DROP            original, then drop in the cold tier (and announce it: every
                            front drops its warm copy); the count is the union
  ATTEND.PREFIX.LOOKUP / QUERY* / KV.PREFIX.WARM   the Stage-2 side (``stage2.py``)

A LOOKUP that hits a warm copy this front cannot vouch for (``freshness.py``) re-reads its
generation first; a stale copy is dropped and the current one promoted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pion.common.ids import k_session, v_session
from pion.server.coldtier.bridge import ColdBridge
from pion.server.coldtier.stage2 import wrap_stage2
from pion.server.commands.kvprefix import DEFERRED, UNKNOWN, parse_hash_blob, parse_lookup_options
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import parse_int, word

if TYPE_CHECKING:
    from pion.server.context import CommandContext

Sync = Callable[["CommandContext", list[bytes]], Any]
Async = Callable[["CommandContext", list[bytes]], Awaitable[Any]]


def _storebatch(original: Sync, bridge: ColdBridge) -> Async:
    async def cmd_vstore_storebatch(ctx: CommandContext, args: list[bytes]) -> Any:
        result = original(ctx, args)  # validates and stores; raises with nothing stored
        await bridge.stored(word(args[0]), parse_int(args[1], "layer"), parse_int(args[2], "start_id"))
        return result
    return cmd_vstore_storebatch


def _register(original: Sync, bridge: ColdBridge) -> Async:
    async def cmd_kvprefix_register(ctx: CommandContext, args: list[bytes]) -> Any:
        ns = word(args[0]) if args else ""
        fresh = bridge.vstore.prefix(ns) is None
        result = original(ctx, args)
        if result is not DEFERRED:  # --admission 2hit deferred it: nothing was created
            await bridge.registered(ns, fresh)
        return result
    return cmd_kvprefix_register


def _lookup(original: Sync, bridge: ColdBridge) -> Async:
    async def cmd_kvprefix_lookup(ctx: CommandContext, args: list[bytes]) -> Any:
        parse_lookup_options(args)  # a bad LOOKUP is refused before anything moves
        ns = word(args[0])
        if bridge.needs_refresh(ns):
            await bridge.promote(ns)
        return original(ctx, args)
    return cmd_kvprefix_lookup


def _blocks(original: Sync, bridge: ColdBridge) -> Async:
    async def cmd_kvprefix_blocks(ctx: CommandContext, args: list[bytes]) -> Any:
        result = original(ctx, args)
        ns = word(args[0])
        if result is UNKNOWN and bridge.warm_absent(ns):
            table = await bridge.blocks(ns)
            return UNKNOWN if table is None else table.wire()
        return result
    return cmd_kvprefix_blocks


def _membership(original: Sync, bridge: ColdBridge) -> Async:
    async def cmd_kvprefix_membership(ctx: CommandContext, args: list[bytes]) -> Any:
        result = original(ctx, args)  # parses the probes first: bad ones are refused here
        ns = word(args[0])
        if result is UNKNOWN and bridge.warm_absent(ns):
            table = await bridge.blocks(ns)
            return UNKNOWN if table is None else table.membership(parse_hash_blob(args[1], args[2]))
        return result
    return cmd_kvprefix_membership


def _drop(original: Sync, bridge: ColdBridge) -> Async:
    async def cmd_kvprefix_drop(ctx: CommandContext, args: list[bytes]) -> Any:
        names = [word(a) for a in args]
        store = bridge.vstore
        warm = {ns for ns in names if store.prefix(ns) is not None or store.get(k_session(ns)) is not None
                or store.get(v_session(ns)) is not None}
        original(ctx, args)
        cold = await bridge.dropped(list(dict.fromkeys(names)))
        return len(warm | cold)
    return cmd_kvprefix_drop


WRAPPERS: dict[str, Callable[[Sync, ColdBridge], Async]] = {
    "V.STOREBATCH": _storebatch,
    "KV.PREFIX.REGISTER": _register,
    "KV.PREFIX.REGISTER.SCHEMA": _register,
    "KV.PREFIX.LOOKUP": _lookup,
    "KV.PREFIX.BLOCKS": _blocks,
    "KV.PREFIX.MEMBERSHIP": _membership,
    "KV.PREFIX.DROP": _drop,
}


def wrap_commands(specs: dict[str, CommandSpec], bridge: ColdBridge) -> None:
    """Swap the seven handlers, and the Stage-2 ones, in ``specs`` (before the Dispatcher copies them)."""
    for name, make in WRAPPERS.items():
        spec = specs[name]
        specs[name] = dataclasses.replace(spec, handler=make(spec.handler, bridge))
    bridge.binary_specs = wrap_stage2(specs, bridge)
