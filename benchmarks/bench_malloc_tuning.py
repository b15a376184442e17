"""RSS and speed of pion-server under --maxmemory with each PION_MALLOC_TUNING mode, one run.

Why: LMCache-shaped values (64 KB-1 MB) churned by eviction left RSS at ~2.3x maxmemory in the
soak (docs/benchmarks.md). ``server/allocator.py`` has three modes (``PION_MALLOC_TUNING``):
``trim`` (the default: glibc's thresholds, ``malloc_trim`` after evictions), ``memory`` (also a
fixed 64 KiB mmap threshold, 128 KiB trim threshold, 2 arenas) and ``off``. This runs the same
workload against three servers, one per mode, phases interleaved: ``--clients`` threads SET
random-size values
under keys drawn from a working set twice ``--maxmemory`` (allkeys-lru evicts), and GET them
back, for ``--seconds`` per phase.

Reported per server: SET+GET ops/s (median over phases), server CPU µs per op (/proc), peak RSS,
RSS - maxmemory - the idle server's RSS (what the allocator and the buffers add), and
``used_memory`` (the bytes eviction bounds) at the end.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_malloc_tuning.py [--clients 16] [--seconds 20]
        [--maxmemory-mb 64] [--phases 2]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.procs import ServerProcess, start_server

VALUE_MIN, VALUE_MAX = 64 * 1024, 1024 * 1024
_POOL = os.urandom(VALUE_MAX)


def rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1]) * 1024


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(server: ServerProcess, clients: int, seconds: float, n_keys: int, seed: int) -> tuple[int, int]:
    """Run the SET/GET mix; (ops done, peak RSS sampled every 0.1 s)."""
    stop = threading.Event()
    counts = [0] * clients

    def client(i: int) -> None:
        rng = random.Random(seed * 100 + i)
        r = redis.Redis(port=server.port, socket_timeout=60)
        while not stop.is_set():
            key = f"v:{rng.randrange(n_keys)}"
            if rng.random() < 0.5:
                r.set(key, _POOL[:rng.randrange(VALUE_MIN, VALUE_MAX)])
            else:
                r.get(key)
            counts[i] += 1
        r.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    peak = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, rss(server.proc.pid))
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    return sum(counts), max(peak, rss(server.proc.pid))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--maxmemory-mb", type=int, default=64)
    parser.add_argument("--phases", type=int, default=2)
    args = parser.parse_args()
    maxmemory = args.maxmemory_mb * 2**20
    n_keys = 2 * maxmemory // ((VALUE_MIN + VALUE_MAX) // 2)
    variants = {"trim (default)": {}, "memory": {"PION_MALLOC_TUNING": "memory"},
                "off": {"PION_MALLOC_TUNING": "off"}}
    with tempfile.TemporaryDirectory(prefix="pion-malloc-") as tmp:
        servers: dict[str, ServerProcess] = {}
        idle: dict[str, int] = {}
        for name, env in variants.items():
            servers[name] = start_server(Path(tmp) / name.split()[0], "--maxmemory", str(maxmemory),
                                         "--maxmemory-policy", "allkeys-lru", "--binary-port", "0",
                                         "--appendfsync", "no", "--wal-max-bytes", "64mb", env=env)
            time.sleep(0.5)
            idle[name] = rss(servers[name].proc.pid)
        ops: dict[str, list[float]] = {n: [] for n in variants}
        cpu_per_op: dict[str, list[float]] = {n: [] for n in variants}
        peaks: dict[str, int] = {n: 0 for n in variants}
        try:
            for p in range(args.phases):
                for name, server in servers.items():
                    cpu0, t0 = cpu_s(server.proc.pid), time.monotonic()
                    done, peak = phase(server, args.clients, args.seconds, n_keys, p)
                    wall, cpu = time.monotonic() - t0, cpu_s(server.proc.pid) - cpu0
                    ops[name].append(done / wall)
                    cpu_per_op[name].append(1e6 * cpu / max(1, done))
                    peaks[name] = max(peaks[name], peak)
            used = {}
            for name, server in servers.items():
                with server.client() as r:
                    used[name] = int(r.info("memory")["used_memory"])
        finally:
            for server in servers.values():
                server.stop()
    print(f"maxmemory {args.maxmemory_mb} MiB, {args.clients} clients, {args.phases} x {args.seconds:.0f} s per "
          f"server, values {VALUE_MIN // 1024} KiB-{VALUE_MAX // 1024} KiB, working set {n_keys} keys")
    print("| malloc | ops/s | server CPU µs/op | idle RSS MiB | peak RSS MiB | peak RSS - maxmemory - idle, MiB "
          "| used_memory MiB |")
    print("|---|---|---|---|---|---|---|")
    for name in variants:
        excess = (peaks[name] - maxmemory - idle[name]) / 2**20
        print(f"| {name} | {statistics.median(ops[name]):,.0f} | {statistics.median(cpu_per_op[name]):.0f} | "
              f"{idle[name] / 2**20:.0f} | {peaks[name] / 2**20:.0f} | {excess:.0f} | {used[name] / 2**20:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
