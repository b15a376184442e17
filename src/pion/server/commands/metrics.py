"""PION.METRICS: this worker's Prometheus text (what ``--metrics-port`` serves), over RESP.

  PION.METRICS -> bulk string, the text exposition of this process's counters
                  (-ERR when the server runs without ``--metrics-port``)

Why a command: under ``-w N`` worker 0 serves the one ``/metrics`` endpoint and asks every
other worker for its families with this command over the peer links
(``server/metrics_workers.py``). It is open to admins only (server-wide counts, like INFO).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.common.errors import CommandError
from pion.server.commands.access import ADMIN
from pion.server.commands.spec import CommandSpec

if TYPE_CHECKING:
    from pion.server.context import CommandContext

METRICS_OFF = "metrics are off: start pion-server with --metrics-port"


def cmd_metrics_pion_metrics(ctx: CommandContext, args: list[bytes]) -> object:
    endpoint = ctx.server.metrics
    if endpoint is None:
        raise CommandError(METRICS_OFF)
    return endpoint.render()


COMMANDS: list[CommandSpec] = [
    CommandSpec("PION.METRICS", 1, cmd_metrics_pion_metrics, frozenset(),
                "this worker's Prometheus text (--metrics-port)", access=ADMIN),
]
