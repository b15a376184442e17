"""Small-command throughput and server CPU per request: pion-server vs Debian's redis-server.

Runs the servers side by side on free loopback ports, then for each server drives
``redis-benchmark -t <test> -n N -d 3`` with and without ``-P 16``, one test at a time, and
reads the server's CPU time (utime + stime from ``/proc/<pid>/stat``) before and after, so

    CPU us/request = (CPU seconds used during the run) / (requests in the run) * 1e6

On a 2-core machine redis-benchmark itself saturates a core, so ops/s partly measures the
client; CPU per request is the robust comparison. Prints a markdown table with ratios.

    .venv/bin/python benchmarks/bench_server_small_ops.py [-n 200000] [--baseline-src DIR]

``--baseline-src`` also runs a second pion-server from another source tree (e.g. a
checkout of the previous commit's ``src``) in the same run, interleaved, and adds a
``Pion ÷ base`` CPU column: how a change moved the per-request cost. ``--pion-args`` adds
flags to the server under test only (``--pion-args "--metrics-port 9121"`` prices the metrics).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TESTS = ("ping", "set", "get")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for_ping(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(100) == b"+PONG\r\n":
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answered PING on port {port}")


@dataclass
class Row:
    server: str
    test: str
    pipeline: int
    rps: float
    cpu_us_per_req: float


def run_one(server: str, pid: int, port: int, test: str, n: int, pipeline: int) -> list[Row]:
    cmd = ["redis-benchmark", "-p", str(port), "-t", test, "-n", str(n), "-d", "3", "--csv",
           "-c", "50"]
    if pipeline > 1:
        cmd += ["-P", str(pipeline)]
    before = cpu_seconds(pid)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    used = cpu_seconds(pid) - before
    rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0] != "test"]
    total_requests = n * len(rows)  # "-t ping" runs PING_INLINE and PING_MBULK
    per_req = used / total_requests * 1e6
    return [Row(server, r[0], pipeline, float(r[1]), per_req) for r in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200_000, help="requests per test")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="a second pion source tree (its src/ dir) to run side by side")
    parser.add_argument("--pion-args", default="",
                        help="extra flags for the pion server under test only, e.g. '--metrics-port 9121',"
                             " to price an option against --baseline-src")
    args = parser.parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            print(f"{tool} not found: apt-get install redis-server redis-tools", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-small-"))
    ports = {"redis": free_port(), "redis+aof": free_port(), "pion": free_port()}
    if args.baseline_src is not None:
        ports["pion-base"] = free_port()
    redis_common = ["--bind", "127.0.0.1", "--save", "", "--dir", str(tmp)]
    procs = {
        "redis": subprocess.Popen(["redis-server", "--port", str(ports["redis"]), *redis_common,
                                   "--appendonly", "no"], stdout=subprocess.DEVNULL),
        # Same durability as pion-server's default (WAL, fsync once a second).
        "redis+aof": subprocess.Popen(["redis-server", "--port", str(ports["redis+aof"]),
                                       *redis_common, "--appendonly", "yes",
                                       "--appendfilename", "bench.aof",
                                       "--appendfsync", "everysec"], stdout=subprocess.DEVNULL),
        "pion": subprocess.Popen([sys.executable, "-m", "pion.server", "--port",
                                  str(ports["pion"]), "--dir", str(tmp / "pion-data"),
                                  *args.pion_args.split()], stdout=subprocess.DEVNULL),
    }
    if args.baseline_src is not None:
        env = {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}
        procs["pion-base"] = subprocess.Popen(
            [sys.executable, "-m", "pion.server", "--port", str(ports["pion-base"]), "--dir",
             str(tmp / "pion-base-data")], stdout=subprocess.DEVNULL, env=env)
    rows: list[Row] = []
    try:
        for port in ports.values():
            wait_for_ping(port)
        for pipeline in (1, 16):
            for test in TESTS:
                for name, port in ports.items():  # interleave so drift hits all alike
                    rows += run_one(name, procs[name].pid, port, test, args.n, pipeline)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

    by_key = {(r.server, r.test, r.pipeline): r for r in rows}
    print(f"redis-benchmark -n {args.n} -d 3 -c 50, one test per run; server CPU from "
          f"/proc/<pid>/stat (utime+stime); redis+aof = appendonly yes, appendfsync everysec "
          f"(pion-server's default WAL policy)\n")
    base_cols = args.baseline_src is not None
    print("| test | -P | ops/s Redis | ops/s Redis+AOF | ops/s Pion | Pion ÷ Redis | "
          "CPU µs/req Redis | Redis+AOF | Pion | CPU Pion ÷ Redis | CPU Pion ÷ Redis+AOF |"
          + (" CPU µs/req base | CPU Pion ÷ base |" if base_cols else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if base_cols else ""))
    for (server, test, pipeline), base in by_key.items():
        if server != "redis":
            continue
        aof, pion = by_key[("redis+aof", test, pipeline)], by_key[("pion", test, pipeline)]
        print(f"| {test} | {pipeline} | {base.rps:,.0f} | {aof.rps:,.0f} | {pion.rps:,.0f} | "
              f"{pion.rps / base.rps:.2f}× | {base.cpu_us_per_req:.2f} | "
              f"{aof.cpu_us_per_req:.2f} | {pion.cpu_us_per_req:.2f} | "
              f"{pion.cpu_us_per_req / base.cpu_us_per_req:.2f}× | "
              f"{pion.cpu_us_per_req / aof.cpu_us_per_req:.2f}× |"
              + (f" {by_key[('pion-base', test, pipeline)].cpu_us_per_req:.2f} | "
                 f"{pion.cpu_us_per_req / by_key[('pion-base', test, pipeline)].cpu_us_per_req:.2f}× |"
                 if base_cols else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
