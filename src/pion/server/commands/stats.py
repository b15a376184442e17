"""PION.STATS: the value receipt (see ``pion.server.receipt``).

  PION.STATS        -> map of 16 fields (RESP3 map; RESP2 flat array of name, value, ...)
  PION.STATS RESET  -> +OK, counters zeroed (uptime keeps running)
  PION.STATS ALL    -> the same map summed over every worker of -w N (this worker's under -w 1;
                       the sum is workers/routing.py's)

Under ``--admission 2hit`` two fields follow the 16: ``admission_deferred`` and
``admission_admitted``. A connection confined to a tenant reads (and RESETs) the tenant's own
receipt; the worker's receipt counts every tenant's traffic too (server/tenants.py).

INFO's ``# Pion`` section shows the same fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import option, syntax_error
from pion.server.resp.replies import OK
from pion.server.tenants import receipt_for

if TYPE_CHECKING:
    from pion.server.context import CommandContext, ServerState


def cmd_stats_pion_stats(ctx: CommandContext, args: list[bytes]) -> object:
    receipt = receipt_for(ctx)
    if not args or (len(args) == 1 and option(args[0]) == "ALL"):  # (ALL: summed by workers/routing.py)
        snapshot: dict[str, int | float] = dict(receipt.snapshot())
        if ctx.server.admission is not None and ctx.server.admission.two_hit:
            snapshot.update(receipt.admission_snapshot())
        return snapshot
    if len(args) == 1 and option(args[0]) == "RESET":
        receipt.reset()
        return OK
    raise syntax_error(args[0] if option(args[0]) != "RESET" else args[1])


def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    snapshot = state.receipt.snapshot()
    return {"Pion": [(name, value if isinstance(value, int) else f"{value:.6f}")
                     for name, value in snapshot.items()]}


COMMANDS: list[CommandSpec] = [
    CommandSpec("PION.STATS", -1, cmd_stats_pion_stats, frozenset(), "the value receipt (RESET zeroes it)"),
]
