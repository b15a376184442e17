"""Small-command throughput and server CPU per request: pion-server vs Debian's redis-server.

Runs the servers side by side on free loopback ports — Redis, Redis with AOF everysec, and
the same Pion tree twice: its mypyc-compiled hot path (when built, ``make compile``) and plain
Python (``PION_PURE_PYTHON=1``) — then for each server drives ``redis-benchmark`` (PING, SET,
GET, MGET of 10 keys, and on Pion V.FETCH of a 1-row range) with and without ``-P 16``, one
test at a time, and
reads the server's CPU time (utime + stime from ``/proc/<pid>/stat``) before and after, so

    CPU us/request = (CPU seconds used during the run) / (requests in the run) * 1e6

On a 2-core machine redis-benchmark itself saturates a core, so ops/s partly measures the
client; CPU per request is the robust comparison. Prints a markdown table with ratios.

    .venv/bin/python benchmarks/bench_server_small_ops.py [-n 200000] [--n16 N] [--only get set]
        [--baseline-src DIR] [--repeat 3]

A third Pion, compiled and started with ``--appendonly no`` (no WAL, Redis's AOF-off rules:
docs/operations.md), runs the write tests (SET) beside Redis without persistence: the
like-for-like pair, as the WAL-on Pion's is Redis+AOF. ``--repeat N`` runs the whole set N
times, interleaved, and prints the median of each cell; each ratio is the ratio of the medians
followed by the min–max of the N per-round ratios.

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
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# (label, redis-benchmark arguments): "-t ping" runs PING_INLINE and
# PING_MBULK; the others are one test each. MGET reads 10 keys that SET filled, V.FETCH one
# 256-byte row (a 1-row range) of a V-store session (Pion only).
MGET_KEYS = [f"key:{i:012d}" for i in range(10)]
TESTS: tuple[tuple[str, list[str]], ...] = (
    ("ping", ["-t", "ping"]),
    ("set", ["-t", "set"]),
    ("get", ["-t", "get"]),
    ("mget10", ["MGET", *MGET_KEYS]),
    ("v.fetch", ["V.FETCH", "bench", "0", "RANGE", "0", "1"]),
)
PION_ONLY = {"v.fetch"}
NO_AOF_TESTS = {"set"}  # what --appendonly no changes: the WAL record per write


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


def run_one(server: str, pid: int, port: int, test: str, bench_args: list[str], n: int,
            pipeline: int) -> list[Row]:
    cmd = ["redis-benchmark", "-p", str(port), "-n", str(n), "-d", "3", "--csv", "-c", "50"]
    if pipeline > 1:
        cmd += ["-P", str(pipeline)]
    before = cpu_seconds(pid)
    out = subprocess.run([*cmd, *bench_args], check=True, capture_output=True, text=True).stdout
    used = cpu_seconds(pid) - before
    rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0] != "test"]
    total_requests = n * len(rows)  # "-t ping" runs PING_INLINE and PING_MBULK
    per_req = used / total_requests * 1e6
    name = (lambda r: r[0]) if bench_args[0] == "-t" else (lambda r: test.upper())
    return [Row(server, name(r), pipeline, float(r[1]), per_req) for r in rows]


def prepare(port: int, pion: bool) -> None:
    """The keys MGET reads and (Pion) the V-store session V.FETCH reads."""
    import redis

    client = redis.Redis(port=port)
    client.mset({key: b"xyz" for key in MGET_KEYS})
    if pion:
        client.execute_command("V.CREATE", "bench", 64)
        client.execute_command("V.STOREBATCH", "bench", 0, 0, bytes(range(256)))
    client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200_000, help="requests per test at -P 1")
    parser.add_argument("--n16", type=int, default=None,
                        help="requests per test at -P 16 (default 10 x -n: CPU time is read in "
                             "10 ms ticks, so a short run has too few of them)")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="a second pion source tree (its src/ dir) to run side by side")
    parser.add_argument("--pion-args", default="",
                        help="extra flags for the pion server under test only, e.g. '--metrics-port 9121',"
                             " to price an option against --baseline-src")
    parser.add_argument("--only", nargs="*", default=None,
                        help="run only these tests (" + ", ".join(t for t, _ in TESTS) + ")")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of the whole set, interleaved: medians and min-max ratios")
    args = parser.parse_args()
    n16 = args.n16 if args.n16 is not None else 10 * args.n
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            print(f"{tool} not found: apt-get install redis-server redis-tools", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-small-"))
    ports = {"redis": free_port(), "redis+aof": free_port(), "pion": free_port(),
             "pion-noaof": free_port(), "pion-pure": free_port()}
    compiled_env = {k: v for k, v in os.environ.items() if k != "PION_PURE_PYTHON"}
    version = subprocess.run([sys.executable, "-m", "pion.server", "--version"], check=True,
                             capture_output=True, text=True, env=compiled_env).stdout.strip()
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
        # The same tree twice: mypyc-compiled hot path (when built) and plain Python.
        "pion": subprocess.Popen([sys.executable, "-m", "pion.server", "--port",
                                  str(ports["pion"]), "--dir", str(tmp / "pion-data"),
                                  *args.pion_args.split()],
                                 stdout=subprocess.DEVNULL, env=compiled_env),
        # The compiled hot path without a WAL: the pair of Redis without persistence.
        "pion-noaof": subprocess.Popen([sys.executable, "-m", "pion.server", "--port",
                                        str(ports["pion-noaof"]), "--dir", str(tmp / "pion-noaof-data"),
                                        "--appendonly", "no", *args.pion_args.split()],
                                       stdout=subprocess.DEVNULL, env=compiled_env),
        "pion-pure": subprocess.Popen([sys.executable, "-m", "pion.server", "--port",
                                       str(ports["pion-pure"]), "--dir",
                                       str(tmp / "pion-pure-data"), *args.pion_args.split()],
                                      stdout=subprocess.DEVNULL,
                                      env={**compiled_env, "PION_PURE_PYTHON": "1"}),
    }
    if args.baseline_src is not None:
        env = {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}
        procs["pion-base"] = subprocess.Popen(
            [sys.executable, "-m", "pion.server", "--port", str(ports["pion-base"]), "--dir",
             str(tmp / "pion-base-data")], stdout=subprocess.DEVNULL, env=env)
    rounds: list[dict[tuple[str, str, int], Row]] = []
    try:
        for name, port in ports.items():
            wait_for_ping(port)
            prepare(port, pion=name.startswith("pion"))
        for _ in range(args.repeat):
            rows: list[Row] = []
            for pipeline in (1, 16):
                for test, bench_args in TESTS:
                    if args.only and test not in args.only:
                        continue
                    for name, port in ports.items():  # interleave so drift hits all alike
                        if test in PION_ONLY and not name.startswith("pion"):
                            continue
                        if name == "pion-noaof" and test not in NO_AOF_TESTS:
                            continue
                        rows += run_one(name, procs[name].pid, port, test, bench_args,
                                        args.n if pipeline == 1 else n16, pipeline)
            rounds.append({(r.server, r.test, r.pipeline): r for r in rows})
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{version}; redis-benchmark -n {args.n} (-P 16: -n {n16}) -d 3 -c 50, one test per "
          f"run; server CPU "
          f"from /proc/<pid>/stat (utime+stime); redis+aof = appendonly yes, appendfsync "
          f"everysec (pion-server's default WAL policy); pure = the same tree with "
          f"PION_PURE_PYTHON=1; 'appendonly no' rows = compiled Pion with --appendonly no; "
          f"{args.repeat} round(s): medians, ratios as ratio of medians (min–max of the rounds)\n")
    print_table(rounds, args.baseline_src is not None)
    return 0


def median_row(rounds: list[dict[tuple[str, str, int], Row]], key: tuple[str, str, int]) -> Row | None:
    """The per-cell median over the rounds (None when the cell was not run)."""
    found = [r[key] for r in rounds if key in r]
    if not found:
        return None
    return Row(key[0], key[1], key[2], statistics.median(r.rps for r in found),
               statistics.median(r.cpu_us_per_req for r in found))


def ratio(rounds: list[dict[tuple[str, str, int], Row]], a: tuple[str, str, int],
          b: tuple[str, str, int], what: str) -> str:
    """``a ÷ b`` of the medians, and the min–max of the per-round ratios when there are several."""
    ma, mb = median_row(rounds, a), median_row(rounds, b)
    if ma is None or mb is None:
        return "—"
    text = f"{getattr(ma, what) / getattr(mb, what):.2f}×"
    per_round = [getattr(r[a], what) / getattr(r[b], what) for r in rounds if a in r and b in r]
    if len(per_round) > 1:
        text += f" ({min(per_round):.2f}–{max(per_round):.2f})"
    return text


def print_table(rounds: list[dict[tuple[str, str, int], Row]], base_cols: bool) -> None:
    """One row per (test, -P) for the WAL-on Pion, then one per write test for --appendonly no
    (its compiled column is that server; its pair is Redis without persistence)."""
    print("| test | -P | ops/s Redis | ops/s Redis+AOF | ops/s Pion pure | ops/s Pion compiled | "
          "ops/s compiled ÷ Redis | CPU µs/req Redis | Redis+AOF | Pion pure | Pion compiled | "
          "CPU compiled ÷ Redis | CPU compiled ÷ Redis+AOF | CPU compiled ÷ pure |"
          + (" CPU µs/req base | CPU Pion ÷ base |" if base_cols else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if base_cols else ""))

    def cell(server: str, test: str, pipeline: int, fmt: str, what: str) -> str:
        row = median_row(rounds, (server, test, pipeline))
        return "—" if row is None else format(getattr(row, what), fmt)

    keys = [k for k in rounds[0] if k[0] == "pion"]
    noaof = [k for k in rounds[0] if k[0] == "pion-noaof"]
    for server, test, pipeline in [*keys, *noaof]:
        me = (server, test, pipeline)
        wal_on = server == "pion"
        label = test if wal_on else f"{test} (appendonly no)"
        dash = "—"
        other = {name: (name, test, pipeline) for name in ("redis", "redis+aof", "pion-pure", "pion-base")}
        line = (f"| {label} | {pipeline} | {cell('redis', test, pipeline, ',.0f', 'rps')} | "
                f"{cell('redis+aof', test, pipeline, ',.0f', 'rps')} | "
                f"{cell('pion-pure', test, pipeline, ',.0f', 'rps') if wal_on else dash} | "
                f"{cell(server, test, pipeline, ',.0f', 'rps')} | {ratio(rounds, me, other['redis'], 'rps')} | "
                f"{cell('redis', test, pipeline, '.2f', 'cpu_us_per_req')} | "
                f"{cell('redis+aof', test, pipeline, '.2f', 'cpu_us_per_req')} | "
                f"{cell('pion-pure', test, pipeline, '.2f', 'cpu_us_per_req') if wal_on else dash} | "
                f"{cell(server, test, pipeline, '.2f', 'cpu_us_per_req')} | "
                f"{ratio(rounds, me, other['redis'], 'cpu_us_per_req')} | "
                f"{ratio(rounds, me, other['redis+aof'], 'cpu_us_per_req') if wal_on else dash} | "
                f"{ratio(rounds, me, other['pion-pure'], 'cpu_us_per_req') if wal_on else dash} |")
        if base_cols:
            line += (f" {cell('pion-base', test, pipeline, '.2f', 'cpu_us_per_req')} | "
                     f"{ratio(rounds, me, other['pion-base'], 'cpu_us_per_req') if wal_on else dash} |")
        print(line)


if __name__ == "__main__":
    sys.exit(main())
