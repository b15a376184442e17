"""SSM.PREFIX.* commands: the recurrent-state half of a hybrid model's prompt prefix.

  SSM.PREFIX.STORE  <ns> <layer> <state_blob>     -> +OK
  SSM.PREFIX.FETCH  <ns> <layer>                  -> bulk | nil
  SSM.PREFIX.MFETCH <ns> <layer_start> <n>        -> array of n (bulk | nil)   (beyond the original design)
  SSM.PREFIX.DROP   <ns> [<layer>]                -> +OK  (no layer: every layer of ns)

``ns`` is the same namespace as the prefix's KV.PREFIX registration (its K/V sessions are
``<ns>_pk``/``<ns>_pv``): the state is evicted and dropped together with them. The blob is
opaque to the server (the client's reference format is in docs/formats.md, "SSM state
blob"). Blobs count toward ``--maxmemory``; a 33.55 MB layer (the original design's 8K-token ceiling)
travels as one bulk string within the default ``--proto-max-bulk-len`` (512mb) and is
written out without a copy, so no 64 MB client buffer caps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.common.errors import CommandError, arity_error
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import parse_int, word
from pion.server.resp.replies import OK
from pion.server.store.session import MAX_LAYERS

if TYPE_CHECKING:
    from pion.server.context import CommandContext, ServerState


def parse_layer(arg: bytes) -> int:
    return parse_int(arg, "layer", 0, MAX_LAYERS - 1)


def cmd_ssm_prefix_store(ctx: CommandContext, args: list[bytes]) -> object:
    ns, layer, blob = word(args[0]), parse_layer(args[1]), args[2]
    if not ns:
        raise CommandError("namespace must not be empty")
    if len(blob) == 0:
        raise CommandError("state_blob is empty")
    ctx.server.stores.ssm.store(ns, layer, blob)
    return OK


def cmd_ssm_prefix_fetch(ctx: CommandContext, args: list[bytes]) -> object:
    layer = parse_layer(args[1])
    return ctx.server.stores.ssm.fetch(word(args[0]), range(layer, layer + 1))[0]


def cmd_ssm_prefix_mfetch(ctx: CommandContext, args: list[bytes]) -> object:
    start = parse_layer(args[1])
    n = parse_int(args[2], "n", 0, MAX_LAYERS - start)
    return ctx.server.stores.ssm.fetch(word(args[0]), range(start, start + n))


def cmd_ssm_prefix_drop(ctx: CommandContext, args: list[bytes]) -> object:
    if len(args) > 2:
        raise arity_error("SSM.PREFIX.DROP")
    layer = parse_layer(args[1]) if len(args) == 2 else None
    ctx.server.stores.ssm.drop(word(args[0]), layer)
    return OK


def ssm_info_fields(state: ServerState) -> list[tuple[str, int]]:
    """The SSM lines of KV.PREFIX.INFO."""
    store = state.stores.ssm
    return [
        ("ssm_prefixes", len(store)),
        ("ssm_layers", store.n_layers),
        ("ssm_bytes", store.nbytes),
        ("ssm_total_fetches", store.total_fetches),
        ("ssm_evicted_prefixes", store.evicted_prefixes),
    ]


_W = frozenset({"write"})
_R = frozenset({"readonly"})
COMMANDS: list[CommandSpec] = [
    CommandSpec("SSM.PREFIX.STORE", 4, cmd_ssm_prefix_store, _W, "store one layer's recurrent state"),
    CommandSpec("SSM.PREFIX.FETCH", 3, cmd_ssm_prefix_fetch, _R, "one layer's recurrent state (nil if none)"),
    CommandSpec("SSM.PREFIX.MFETCH", 4, cmd_ssm_prefix_mfetch, _R,
                "n consecutive layers' recurrent state in one reply"),
    CommandSpec("SSM.PREFIX.DROP", -2, cmd_ssm_prefix_drop, _W, "drop one layer's or every layer's state"),
]
