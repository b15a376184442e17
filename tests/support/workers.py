"""Helpers for tests of ``pion-server -w N``: reach each worker on its own address."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from support.procs import ServerProcess, start_server


@dataclass
class WorkerGroup:
    """A running ``-w N`` server and every worker's own port (from PION.WORKER)."""

    server: ServerProcess
    ports: list[int]

    def worker(self, index: int, protocol: int = 2, db: int = 0) -> redis.Redis:
        """A client pinned to worker ``index`` (its own address)."""
        return redis.Redis(host="127.0.0.1", port=self.ports[index], password=self.server.password,
                           protocol=protocol, db=db, socket_timeout=10)

    def pids(self) -> list[int]:
        out = []
        for index in range(len(self.ports)):
            with self.worker(index) as conn:
                out.append(int(worker_info(conn)["pid"]))
        return out


def worker_info(conn: redis.Redis) -> dict[str, object]:
    """PION.WORKER as a dict of str keys (RESP2 flat array or RESP3 map)."""
    reply = conn.execute_command("PION.WORKER")
    if isinstance(reply, dict):
        items = list(reply.items())
    else:
        items = list(zip(reply[::2], reply[1::2], strict=True))
    out: dict[str, object] = {}
    for key, value in items:
        name = key.decode() if isinstance(key, bytes) else key
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list):
            value = [v.decode() if isinstance(v, bytes) else v for v in value]
        out[name] = value
    return out


def start_workers(data_dir: Path, n: int, *args: str, password: str | None = None) -> WorkerGroup:
    """Start ``pion-server -w n`` with the workers on free ports; returns the group."""
    server = start_server(data_dir, "-w", str(n), "--worker-port-base", "0", *args, password=password)
    try:
        with server.client(socket_timeout=10) as conn:
            addresses = worker_info(conn)["addresses"]
    except BaseException:
        server.stop()
        raise
    assert isinstance(addresses, list)
    group = WorkerGroup(server, [int(str(a).rsplit(":", 1)[1]) for a in addresses])
    wait_for_workers(group)
    return group


def wait_for_workers(group: WorkerGroup, wait_s: float = 30.0) -> None:
    """Wait until every worker answers on its own address: the shared port answers as soon as
    one worker listens, and a command forwarded to a worker not listening yet is refused."""
    deadline = time.monotonic() + wait_s
    for index in range(len(group.ports)):
        while True:
            try:
                with socket.create_connection(("127.0.0.1", group.ports[index]), timeout=1.0):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
