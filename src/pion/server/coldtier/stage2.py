"""The Stage-2 (ATTEND.PREFIX.*) side on a cold-tier front: ``+COLD`` / ``-COLDMISS`` for prefixes
whose K/V live in a tier below the ATTEND slots, and ``KV.PREFIX.WARM`` that promotes first.

The ATTEND slots are derived data: ``KV.PREFIX.WARM`` rebuilds them from the V-store
(protocol.md, "The cold tier"). The original design's ``COLD`` state means exactly that — "the
K/V are in a tier below; rehydrate and retry" — so on a front with ``--cold-tier`` it also
covers K/V that are in the *shared* cold tier, or in this front's V-store while the slot is not:

  ATTEND.PREFIX.LOOKUP sid layer   a warm MISS answers ``+COLD`` when the layer's K and V are in
                                   the V-store, demoted from it, or in the cold index (one round trip)
  ATTEND.PREFIX.QUERY*             a slot never held answers ``-COLDMISS sid layer`` (not ``-ERR
                                   not found``) when the V-store holds the prefix or this front
                                   demoted it — sync, no cluster call, so the binary lane answers
                                   the same; PionPromptCache's lanes then run KV.PREFIX.WARM and retry
  KV.PREFIX.WARM ns H D [sid]      promotes ``ns`` from the cold tier first (or re-checks a copy
                                   this front cannot vouch for), then rebuilds the slots

The ATTEND session of a prefix is ``<ns>_attn`` (PionPromptCache) or ``<ns>`` (WARM's default):
both are tried. The binary lane runs handlers synchronously, so it keeps sync variants of LOOKUP
(no cluster read) and WARM (no promotion) — ``ColdBridge.binary_specs``, which
``binary_lane.start_binary_lane`` lays over the table.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pion.server.coldtier.bridge import ATTN_SUFFIX, ColdBridge
from pion.server.commands.attend_args import parse_layer
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import word
from pion.server.resp.replies import SimpleString
from pion.server.store.attend_slots import ColdMiss, SlotNotFound

if TYPE_CHECKING:
    from pion.server.context import CommandContext

Sync = Callable[["CommandContext", list[bytes]], Any]
Async = Callable[["CommandContext", list[bytes]], Awaitable[Any]]
COLD = SimpleString("COLD")
QUERIES = ("ATTEND.PREFIX.QUERY", "ATTEND.PREFIX.QUERY_FUSED", "ATTEND.PREFIX.QUERY_SPARSE",
           "ATTEND.PREFIX.QUERY_SPARSE_AUTO", "ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED")


def prefixes_of(sid: str) -> list[str]:
    """The prefix namespaces an ATTEND session may belong to, most specific first."""
    if sid.endswith(ATTN_SUFFIX) and len(sid) > len(ATTN_SUFFIX):
        return [sid[: -len(ATTN_SUFFIX)], sid]
    return [sid]


def layer_below(bridge: ColdBridge, ns: str, layer: int) -> bool:
    """Sync: KV.PREFIX.WARM would rebuild this layer from this front's V-store, or the front
    demoted the prefix (its promotion brings the layer back)."""
    store = bridge.vstore
    k_side, v_side = store.get(ns + "_pk"), store.get(ns + "_pv")
    if k_side is not None and v_side is not None:
        return layer in k_side.layers and layer in v_side.layers and 0 < k_side.rows_in(layer) == v_side.rows_in(layer)
    return ns in bridge.demoted


async def layer_in_cold_tier(bridge: ColdBridge, ns: str, layer: int) -> bool:
    index = await bridge.tier.read_index(ns)
    if index is None or not index.hit():
        return False
    return 0 < index.rows.get(("k", layer), 0) == index.rows.get(("v", layer), 0)


def _is_miss(result: Any) -> bool:
    return isinstance(result, SimpleString) and result.text == "MISS"


def _lookup(original: Sync, bridge: ColdBridge) -> Async:
    @functools.wraps(original)
    async def cmd_attend_lookup(ctx: CommandContext, args: list[bytes]) -> Any:
        result = original(ctx, args)  # parses first: a bad layer is refused, nothing read
        if not _is_miss(result):
            return result
        sid, layer = word(args[0]), parse_layer(args[1])
        for ns in prefixes_of(sid):
            if layer_below(bridge, ns, layer) or await layer_in_cold_tier(bridge, ns, layer):
                return COLD
        return result
    return cmd_attend_lookup


def _lookup_sync(original: Sync, bridge: ColdBridge) -> Sync:
    @functools.wraps(original)
    def cmd_attend_lookup(ctx: CommandContext, args: list[bytes]) -> Any:
        result = original(ctx, args)
        if _is_miss(result):
            layer = parse_layer(args[1])
            if any(layer_below(bridge, ns, layer) for ns in prefixes_of(word(args[0]))):
                return COLD
        return result
    return cmd_attend_lookup


def _query(original: Sync, bridge: ColdBridge) -> Sync:
    @functools.wraps(original)
    def handler(ctx: CommandContext, args: list[bytes]) -> Any:
        try:
            return original(ctx, args)
        except SlotNotFound as exc:
            if any(layer_below(bridge, ns, exc.layer) for ns in prefixes_of(exc.sid)):
                raise ColdMiss(exc.sid, exc.layer) from None
            raise
    return handler


def _warm(original: Sync, bridge: ColdBridge) -> Async:
    @functools.wraps(original)
    async def cmd_attend_kvprefix_warm(ctx: CommandContext, args: list[bytes]) -> Any:
        ns = word(args[0])
        if len(args) <= 4 and bridge.needs_refresh(ns):  # a bad arity is the original's to refuse
            await bridge.promote(ns)
        return original(ctx, args)
    return cmd_attend_kvprefix_warm


def wrap_stage2(specs: dict[str, CommandSpec], bridge: ColdBridge) -> dict[str, CommandSpec]:
    """Swap the Stage-2 handlers in ``specs``; returns the binary lane's sync variants."""
    binary: dict[str, CommandSpec] = {}
    lookup, warm = specs["ATTEND.PREFIX.LOOKUP"], specs["KV.PREFIX.WARM"]
    specs[lookup.name] = dataclasses.replace(lookup, handler=_lookup(lookup.handler, bridge))
    binary[lookup.name] = dataclasses.replace(lookup, handler=_lookup_sync(lookup.handler, bridge))
    specs[warm.name] = dataclasses.replace(warm, handler=_warm(warm.handler, bridge))
    binary[warm.name] = warm
    for name in QUERIES:
        spec = specs[name]
        specs[name] = dataclasses.replace(spec, handler=_query(spec.handler, bridge))
    return binary
