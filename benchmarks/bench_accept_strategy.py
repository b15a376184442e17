"""How -w N spreads connections over workers: SO_REUSEPORT vs one shared listening socket vs an
accept front, on a minimal uvloop PING server (so only the accept strategy differs).

Each variant forks 2 worker processes that answer ``+PONG`` to every PING (RESP multibulk):

* ``reuseport``: each worker binds its own SO_REUSEPORT socket on the port (what pion-server does);
  the kernel hashes each new connection to one worker.
* ``shared``: the parent binds and listens once; both workers accept on the inherited socket.
* ``front``: the parent accepts every connection and hands the socket to the workers in turn
  over a Unix socket (SCM_RIGHTS); the workers never listen.

For each: ``redis-benchmark -t ping -c 50 -P 16 -n N`` (PING_MBULK), ops/s, and how many of the 50
connections each worker served (read from the workers at the end).

    .venv/bin/python benchmarks/bench_accept_strategy.py [-n 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import uvloop

PONG = b"+PONG\r\n"


class Ping(asyncio.Protocol):
    served = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        Ping.served += 1

    def data_received(self, data: bytes) -> None:
        n = data.count(b"PING")
        # redis-benchmark first asks CONFIG GET save/appendonly: an empty array will do.
        self.transport.write(PONG * n if n else b"*0\r\n")  # type: ignore[attr-defined]


async def worker(mode: str, port: int, listen_sock: socket.socket | None, fd_sock: socket.socket | None,
                 report: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if mode == "reuseport":
        await loop.create_server(Ping, "127.0.0.1", port, reuse_port=True, backlog=511)
    elif mode == "shared":
        assert listen_sock is not None
        await loop.create_server(Ping, sock=listen_sock)
    else:
        assert fd_sock is not None
        fd_sock.setblocking(False)

        def take() -> None:
            try:
                _, fds, _, _ = socket.recv_fds(fd_sock, 1, 16)
            except BlockingIOError:
                return
            for fd in fds:
                conn = socket.socket(fileno=fd)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as create_server does
                loop.create_task(loop.connect_accepted_socket(Ping, conn))
        loop.add_reader(fd_sock.fileno(), take)
    os.write(report, b"R")
    await stop.wait()
    os.write(report, b"%d\n" % Ping.served)


def run_variant(mode: str, n: int) -> tuple[float, list[int]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    listen_sock = None
    if mode == "shared":
        listen_sock = socket.socket()
        listen_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen_sock.bind(("127.0.0.1", port))
        listen_sock.listen(511)
        listen_sock.setblocking(False)
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)] if mode == "front" else []
    pids, reports = [], []
    for i in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            uvloop.run(worker(mode, port, listen_sock, pairs[i][1] if pairs else None, w))
            os._exit(0)
        os.close(w)
        pids.append(pid)
        reports.append(r)
    for r in reports:
        assert os.read(r, 1) == b"R"
    front = None
    if mode == "front":
        front = socket.socket()
        front.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        front.bind(("127.0.0.1", port))
        front.listen(511)
        front_pid = os.fork()
        if front_pid == 0:
            turn = 0
            while True:
                conn, _ = front.accept()
                socket.send_fds(pairs[turn % 2][0], [b"x"], [conn.fileno()])
                conn.close()
                turn += 1
        pids.append(front_pid)
    time.sleep(0.2)
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "ping", "-c", "50", "-P", "16", "-n", str(n),
                          "--csv"], check=True, capture_output=True, text=True).stdout
    rps = {r[0]: float(r[1]) for r in csv.reader(io.StringIO(out)) if r and r[0] != "test"}["PING_MBULK"]
    served = []
    for pid, r in zip(pids, reports + [None], strict=False):
        os.kill(pid, signal.SIGTERM if r is not None else signal.SIGKILL)
    for r in reports:
        served.append(int(os.read(r, 100).split()[-1]) // 2)  # PING_INLINE and PING_MBULK each open 50
    for pid in pids:
        os.waitpid(pid, 0)
    return rps, served


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200_000)
    args = parser.parse_args()
    if shutil.which("redis-benchmark") is None:
        print("redis-benchmark not found: apt-get install redis-tools", file=sys.stderr)
        return 2
    print(f"redis-benchmark -t ping -c 50 -P 16 -n {args.n}; 2 uvloop workers answering +PONG\n")
    print("| strategy | PING_MBULK ops/s | connections per worker (of 50) |")
    print("|---|---|---|")
    for mode in ("reuseport", "shared", "front"):
        rps, served = run_variant(mode, args.n)
        print(f"| {mode} | {rps:,.0f} | {' / '.join(map(str, served))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
