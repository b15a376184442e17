"""``pion-server`` entry point: config, logging, event loop, signals, clean shutdown.

Start-up: build the config (CLI + ``PION_*``), load the command families, call their
``setup(state)`` hooks inside the running loop, open the listener, log one summary line
with the effective config. SIGTERM/SIGINT: stop accepting, let in-flight commands
answer, close clients, call the families' ``shutdown(state)`` hooks (flushing), exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

import uvloop

from pion import __version__
from pion.common.errors import ConfigError
from pion.common.logs import setup_logging
from pion.common.options import exit_on_config_error
from pion.server.commands.table import build_table
from pion.server.config import ServerConfig, load_config
from pion.server.context import ServerState
from pion.server.dispatcher import Dispatcher
from pion.server.net import PionServer

log = logging.getLogger("pion.server")


def configure_logging(level: str) -> None:
    """The one Pion log setup (stderr, one format; ``pion.common.logs``)."""
    setup_logging(level)


async def serve(config: ServerConfig) -> int:
    """Run one worker until SIGTERM/SIGINT; returns the process exit code."""
    state = ServerState(config=config, started_at=time.time())
    table = build_table()
    dispatcher = Dispatcher(table.specs, config.requirepass, config.slowlog_log_slower_than_us,
                            config.slowlog_max_len)
    server = PionServer(state, dispatcher)
    state.components["table"] = table
    state.components["clients"] = server.clients
    state.components["server"] = server
    config.data_dir.mkdir(parents=True, exist_ok=True)
    table.setup(state)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.bind, config.port, exc)
        await table.shutdown(state)
        return 1
    log.info("pion-server %s ready on %s:%d (pid %d, %d commands from %d families) %s",
             __version__, config.bind, server.port, os.getpid(), len(table.specs),
             len(table.families), config.summary())
    await stop.wait()
    log.info("shutdown requested: closing the listener and draining %d client(s)",
             len(server.clients))
    await server.stop()
    await table.shutdown(state)
    log.info("pion-server stopped cleanly")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``pion-server``."""
    try:
        config = load_config(argv, version=__version__)
    except ConfigError as exc:
        return exit_on_config_error("pion-server", exc)
    configure_logging(config.loglevel)
    return uvloop.run(serve(config))


if __name__ == "__main__":
    sys.exit(main())
