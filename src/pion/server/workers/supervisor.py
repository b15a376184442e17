"""``pion-server -w N``: the parent process that runs N workers behind one port.

The parent binds the shared port and every worker's own port first (SO_REUSEPORT sockets it
never listens on: they resolve ``--port 0``, and keep the ports while a worker restarts),
creates the cross-worker directory (``directory.py``; not under ``--independent-workers``)
and forks the workers. Each worker is a normal single-worker server (``main.serve``) that
joins the shared port's SO_REUSEPORT group — the kernel spreads new connections over the
workers by a hash of the client's address — and listens on its own address too.

* start-up: the parent waits until every worker said it is ready (a byte on a pipe); a worker
  that exits first (a damaged data directory, a port in use) stops the others, and the parent
  exits with its code.
* SIGTERM/SIGINT: forwarded to every worker, which drains like a single server; the parent
  exits 0 once they all exited 0.
* a worker that dies (crash, SIGKILL) is forked again with the same number: it replays its
  own snapshot + WAL (``pion.vstore.<w>``), republishes what it holds in the directory, and the
  other workers serve on meanwhile. More than ``MAX_RESTARTS`` in ``RESTART_WINDOW_S`` stops all.
* ``pion.workers`` in ``--dir`` records N: a restart with another N is refused (exit 1) with
  the reason, since worker w's files hold worker w's sessions.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

from pion.common.logs import setup_logging
from pion.server.binary_lane import plain_binary_lane
from pion.server.config import ServerConfig
from pion.server.workers.directory import Directory
from pion.server.workers.ghosts import SharedGhosts
from pion.server.workers.runtime import WorkerAddress, WorkerRuntime

log = logging.getLogger("pion.server.workers")

COUNT_FILE = "pion.workers"
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
RESTART_DELAY_S = 0.2
STOP_TIMEOUT_S = 30.0
POLL_S = 0.05
Serve = Callable[[ServerConfig, WorkerRuntime | None, Callable[[], None] | None], Coroutine[Any, Any, int]]


def check_worker_count(config: ServerConfig) -> str | None:
    """Why ``--dir`` cannot be opened with ``-w config.workers`` (None: it can)."""
    path = config.data_dir / COUNT_FILE
    try:
        recorded = int(path.read_text().strip())
    except FileNotFoundError:
        return _stray_worker_files(config)
    except ValueError:
        return f"{path} is damaged (expected a worker count); remove it only if you know the count"
    if recorded != config.workers:
        return (f"--dir {config.data_dir} holds the data of {recorded} workers (pion.workers) but this "
                f"server was started with -w {config.workers}: start it with -w {recorded} "
                "(each worker's sessions live in its own pion.vstore.<w> files; docs/workers.md)")
    return None


def _stray_worker_files(config: ServerConfig) -> str | None:
    workers = set()
    if config.data_dir.is_dir():
        for path in config.data_dir.glob("pion.vstore.*"):
            number = path.name.split(".")[2]
            if number.isdigit():
                workers.add(int(number))
    beyond = sorted(w for w in workers if w >= config.workers)
    if beyond:
        return (f"--dir {config.data_dir} holds files of worker {beyond[0]} (pion.vstore.{beyond[0]}*) "
                f"but this server was started with -w {config.workers}: start it with -w {max(workers) + 1}")
    return None


def _reserve(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _advertised(bind: str) -> str:
    """The host a redirect names: the bind address, or loopback for a wildcard bind."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(bind, bind)


@dataclasses.dataclass
class _Child:
    worker_id: int
    pid: int
    ready_fd: int
    ready: bool = False


class Supervisor:
    """The parent: forks, watches, restarts and stops the workers (module docstring)."""

    def __init__(self, config: ServerConfig, serve: Serve) -> None:
        self.config = config
        self.serve = serve
        self.stopping = False
        self.children: dict[int, _Child] = {}  # by pid
        self.restarts: list[float] = []
        self.sockets: list[socket.socket] = []
        self.directory: Directory | None = None
        self.ghosts: SharedGhosts | None = None  # --admission 2hit's shared ghost list (ghosts.py)
        self.addresses: list[WorkerAddress] = []
        self.binary_addresses: list[WorkerAddress] = []  # each worker's own binary-lane address
        self.worker_config = config

    # ---- set-up --------------------------------------------------------------------------
    def prepare(self) -> None:
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        shared = _reserve(config.bind, config.port)
        self.sockets.append(shared)
        port = int(shared.getsockname()[1])
        base = port + 100 if config.worker_port_base < 0 else config.worker_port_base
        host = _advertised(config.bind)
        for worker in range(config.workers):
            sock = _reserve(config.bind, base + worker if base else 0)
            self.sockets.append(sock)
            self.addresses.append(WorkerAddress(host, int(sock.getsockname()[1])))
        # Workers serve the ports reserved here, the binary lane's too (docs/workers.md).
        self.worker_config = dataclasses.replace(config, port=port, binary_port=self._reserve_binary(port, base))
        if not config.independent_workers:
            self.directory = Directory.create(config.directory_slots, config.data_dir)
            if config.admission == "2hit":
                self.ghosts = SharedGhosts.create(config.admission_window, config.data_dir)
        (config.data_dir / COUNT_FILE).write_text(f"{config.workers}\n")

    def _reserve_binary(self, port: int, base: int) -> int:
        """Reserve the ATTEND binary lane's ports: the shared one (``--binary-port``, default
        port + 1) and worker i's own at ``base + N + i`` (after the RESP workers' own ports; any
        free ports with base 0). Returns the shared port, or 0 — the lane off, like a single
        server that cannot bind it — when it is off or a port is taken."""
        config = self.config
        if not plain_binary_lane(config):
            return 0
        wanted = config.binary_port if config.binary_port > 0 else (port + 1 if config.port else 0)
        n = config.workers
        try:
            socks = [_reserve(config.bind, wanted)]
            socks += [_reserve(config.bind, base + n + w if base else 0) for w in range(n)]
        except OSError as exc:
            log.warning("binary lane: cannot reserve its ports (%s); running without it", exc)
            return 0
        self.sockets.extend(socks)
        host = _advertised(config.bind)
        self.binary_addresses = [WorkerAddress(host, int(s.getsockname()[1])) for s in socks[1:]]
        return int(socks[0].getsockname()[1])

    def spawn(self, worker_id: int) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(read_fd)
            code = 1
            try:
                code = self._worker_main(worker_id, write_fd)
            except BaseException:
                log.exception("worker %d failed", worker_id)
            finally:
                os._exit(code)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.children[pid] = _Child(worker_id, pid, read_fd)

    def _worker_main(self, worker_id: int, ready_fd: int) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        for sock in self.sockets:
            sock.close()
        for child in self.children.values():
            if not child.ready:
                os.close(child.ready_fd)
        setup_logging(self.config.loglevel, tag=f"w{worker_id}")
        runtime = WorkerRuntime(worker_id, tuple(self.addresses), self.directory, self.config.requirepass,
                                self.config.worker_placement, binary_addresses=tuple(self.binary_addresses),
                                ghosts=self.ghosts)

        def ready() -> None:
            os.write(ready_fd, b"R")
            os.close(ready_fd)
        return uvloop.run(self.serve(self.worker_config, runtime, ready))

    # ---- running --------------------------------------------------------------------------
    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        for worker in range(self.config.workers):
            self.spawn(worker)
        code = self._wait_ready()
        if code is not None:
            self._stop_all()
            return code
        log.info("pion-server ready on %s:%d with %d workers (%s; own addresses %s) %s",
                 self.config.bind, self.worker_config.port, self.config.workers,
                 "independent" if self.config.independent_workers else "shared directory",
                 " ".join(f"w{i}={a}" for i, a in enumerate(self.addresses)), self.config.summary())
        while not self.stopping:
            self._reap(restart=True)
            self._poll_ready()
            time.sleep(POLL_S)
        log.info("shutdown requested: stopping %d worker(s)", len(self.children))
        return self._stop_all()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _poll_ready(self) -> None:
        for child in self.children.values():
            if not child.ready:
                try:
                    child.ready = os.read(child.ready_fd, 1) == b"R"
                except BlockingIOError:
                    continue
                if child.ready:
                    os.close(child.ready_fd)

    def _wait_ready(self) -> int | None:
        """None once every worker is ready; the exit code of one that died first."""
        while not all(c.ready for c in self.children.values()):
            if self.stopping:
                return 0
            self._poll_ready()
            died = self._reap(restart=False)
            if died is not None:
                return died
            time.sleep(POLL_S / 5)
        return None

    def _reap(self, restart: bool) -> int | None:
        """Collect exited workers; restart them (or return the first one's exit code)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid == 0:
                return None
            child = self.children.pop(pid, None)
            if child is None:
                continue
            if not child.ready:
                os.close(child.ready_fd)
            code = os.waitstatus_to_exitcode(status)
            if not restart or self.stopping:
                log.error("worker %d (pid %d) exited with %d during start-up", child.worker_id, pid, code)
                return code if code > 0 else 1
            now = time.monotonic()
            self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW_S] + [now]
            if len(self.restarts) > MAX_RESTARTS:
                log.error("worker %d (pid %d) exited with %d: more than %d restarts in %.0fs, stopping",
                          child.worker_id, pid, code, MAX_RESTARTS, RESTART_WINDOW_S)
                self.stopping = True
                return None
            log.warning("worker %d (pid %d) exited with %d; restarting it (its WAL is replayed)",
                        child.worker_id, pid, code)
            time.sleep(RESTART_DELAY_S * (len(self.restarts) - 1))  # back off when it keeps dying
            self.spawn(child.worker_id)

    def _stop_all(self) -> int:
        for child in self.children.values():
            _signal(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        worst = 0
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                if time.monotonic() > deadline:
                    for child in self.children.values():
                        log.warning("worker %d did not stop in %.0fs; killing it", child.worker_id,
                                    STOP_TIMEOUT_S)
                        _signal(child.pid, signal.SIGKILL)
                    deadline = float("inf")
                time.sleep(POLL_S)
                continue
            stopped = self.children.pop(pid, None)
            code = os.waitstatus_to_exitcode(status)
            if stopped is not None and code != 0:
                log.warning("worker %d exited with %d", stopped.worker_id, code)
                worst = max(worst, code if code > 0 else 1)
        return worst

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        if self.directory is not None:
            self.directory.destroy()
            self.directory = None
        if self.ghosts is not None:
            self.ghosts.destroy()
            self.ghosts = None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def run_workers(config: ServerConfig, serve: Serve) -> int:
    """``pion-server -w N`` (N > 1): returns the parent's exit code."""
    refusal = check_worker_count(config)
    if refusal is not None:
        log.error("%s", refusal)
        return 1
    supervisor = Supervisor(config, serve)
    try:
        supervisor.prepare()
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.bind, config.port, exc)
        supervisor.close()
        return 1
    try:
        code = supervisor.run()
    finally:
        supervisor.close()
    log.info("pion-server stopped (%d workers)", config.workers)
    return code


__all__ = ["COUNT_FILE", "check_worker_count", "run_workers"]
