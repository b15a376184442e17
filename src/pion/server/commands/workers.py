"""PION.WORKER: which worker of ``pion-server -w N`` this connection is on, and where the others are.

  PION.WORKER  -> map: id, workers, mode (single | shared | independent), pid, address
                  (this worker's own host:port), addresses (every worker's), placement;
                  under -w N with the binary lane on, also binary_address / binary_addresses
                  (each worker's own ATTEND binary-lane address)

A client pins a connection to worker N by connecting to ``addresses[N]`` (docs/workers.md);
the single-process server answers id 0 of 1 with its one address.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pion.server.commands.spec import CommandSpec

if TYPE_CHECKING:
    from pion.server.context import CommandContext, ServerState


def cmd_workers_pion_worker(ctx: CommandContext, args: list[bytes]) -> object:
    return worker_fields(ctx.server)


def worker_fields(state: ServerState) -> dict[str, object]:
    runtime = state.worker
    if runtime is None:
        address = f"{state.config.bind}:{state.network.port}"
        return {"id": 0, "workers": 1, "mode": "single", "pid": os.getpid(), "address": address,
                "addresses": [address], "placement": "connection"}
    fields: dict[str, object] = {
        "id": runtime.worker_id, "workers": runtime.n_workers,
        "mode": "independent" if runtime.independent else "shared", "pid": os.getpid(),
        "address": str(runtime.address(runtime.worker_id)),
        "addresses": [str(a) for a in runtime.addresses], "placement": runtime.placement}
    if runtime.binary_addresses:
        fields["binary_address"] = str(runtime.binary_addresses[runtime.worker_id])
        fields["binary_addresses"] = [str(a) for a in runtime.binary_addresses]
    return fields


def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    fields = worker_fields(state)  # (``workers`` is already a core Server field)
    return {"Server": [("worker_id", fields["id"]), ("worker_mode", fields["mode"]),
                       ("worker_address", fields["address"])]}


COMMANDS: list[CommandSpec] = [
    CommandSpec("PION.WORKER", 1, cmd_workers_pion_worker, frozenset({"fast"}),
                "which worker this connection is on, and every worker's address"),
]
