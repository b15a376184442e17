"""--maxmemory-policy: is Redis's sampled LRU good enough here, what does tracking cost, and how
does a pion-server that evicts compare with redis-server doing the same (issue 21).

Part 1, in-process, one skewed trace (Zipf s=1.0 over ``--universe`` keys, a GET and on a miss a
SET, cache sized to hold ``--cache-frac`` of the keys), through pion's own ``Keyspace`` +
``Evictor``: Redis's sampled LRU (samples 5 and 10, pool of 16 — run as volatile-lru with every
key given a far TTL, the same sampling code every sampled policy uses) next to the exact LRU
that ``allkeys-lru`` runs (per-database OrderedDict), and a bare OrderedDict LRU as the floor.
Hit ratio and µs per operation: the issue's "or exact LRU if cheaper here — measure".

Part 2, servers side by side: ``redis-benchmark -t set,get -r <keyspace> -d 1000 -P 16`` against
redis-server and pion-server, each with ``--maxmemory`` well under the working set and
``allkeys-lru`` (so every SET evicts), plus pion-server without a budget (tracking off: what
eviction adds). Server CPU per request from /proc.

    PYTHONPATH=src python benchmarks/bench_eviction.py [--ops 200000] [-n 100000]
"""

from __future__ import annotations

import argparse
import csv
import io
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from bench_server_small_ops import cpu_seconds, free_port, wait_for_ping

from pion.server.store.eviction import Evictor
from pion.server.store.keyspace import Keyspace, entry_bytes


def zipf_trace(universe: int, ops: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(universe)]
    return rng.choices(range(universe), weights, k=ops)


def run_pion(trace: list[int], capacity_bytes: int, policy: str, samples: int) -> tuple[float, float]:
    """Hit ratio and µs per operation of pion's Keyspace + Evictor on ``trace``."""
    ks = Keyspace()
    evictor = Evictor((ks,))
    evictor.configure(policy, samples, capacity_bytes)
    deadline = None if policy == "allkeys-lru" else 2**62
    value = b"v" * 100
    hits = 0
    start = time.perf_counter()
    for k in trace:
        key = b"k%d" % k
        if ks.get(key) is not None:
            hits += 1
            continue
        over = ks.used_bytes + entry_bytes(key, value) - capacity_bytes
        if over > 0:
            evictor.evict(over)
        ks.set(key, value, expire_at_ms=deadline)
    elapsed = time.perf_counter() - start
    return hits / len(trace), elapsed / len(trace) * 1e6


def run_exact(trace: list[int], capacity_bytes: int) -> tuple[float, float]:
    """The same with an exact LRU: an OrderedDict moved to the end on every hit."""
    cache: OrderedDict[bytes, bytes] = OrderedDict()
    used = 0
    value = b"v" * 100
    hits = 0
    start = time.perf_counter()
    for k in trace:
        key = b"k%d" % k
        if key in cache:
            cache.move_to_end(key)
            hits += 1
            continue
        size = entry_bytes(key, value)
        while cache and used + size > capacity_bytes:
            old, old_value = cache.popitem(last=False)
            used -= entry_bytes(old, old_value)
        cache[key] = value
        used += size
    elapsed = time.perf_counter() - start
    return hits / len(trace), elapsed / len(trace) * 1e6


def part1(args: argparse.Namespace) -> None:
    trace = zipf_trace(args.universe, args.ops)
    capacity = int(args.universe * args.cache_frac) * entry_bytes(b"k%d" % args.universe, b"v" * 100)
    print(f"Part 1: Zipf(1.0) trace, {args.ops} GET-or-SET ops over {args.universe} keys, "
          f"cache of {args.cache_frac:.0%} of the keys\n")
    print("| policy | hit ratio | µs/op | hit ratio ÷ exact |")
    print("|---|---:|---:|---:|")
    exact_hits, exact_us = run_exact(trace, capacity)
    for samples in (5, 10):
        hits, us = run_pion(trace, capacity, "volatile-lru", samples)
        print(f"| Redis-style sampled LRU, samples {samples} (Keyspace + Evictor) | {hits:.4f} | {us:.2f} | "
              f"{hits / exact_hits:.3f}× |")
    hits, us = run_pion(trace, capacity, "allkeys-lru", 5)
    print(f"| pion allkeys-lru: exact (Keyspace + Evictor) | {hits:.4f} | {us:.2f} | {hits / exact_hits:.3f}× |")
    print(f"| bare OrderedDict LRU (no keyspace) | {exact_hits:.4f} | {exact_us:.2f} | 1.000× |\n")


def bench(port: int, pid: int, n: int, keyspace: int) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for test in ("set", "get"):
        before = cpu_seconds(pid)
        text = subprocess.run(["redis-benchmark", "-p", str(port), "-t", test, "-n", str(n), "-r", str(keyspace),
                               "-d", "1000", "-P", "16", "-c", "20", "--csv"],
                              check=True, capture_output=True, text=True).stdout
        used = cpu_seconds(pid) - before
        row = [r for r in csv.reader(io.StringIO(text)) if r and r[0] != "test"][0]
        out[test] = (float(row[1]), used / n * 1e6)
    return out


def part2(args: argparse.Namespace) -> None:
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        print("Part 2 skipped: redis-server / redis-benchmark not installed")
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-evict-"))
    budget = args.budget_mb * 1024**2
    ports = {name: free_port() for name in ("redis", "pion", "pion-unbounded")}
    procs = {
        "redis": subprocess.Popen(["redis-server", "--port", str(ports["redis"]), "--save", "", "--appendonly", "no",
                                   "--dir", str(tmp), "--maxmemory", str(budget),
                                   "--maxmemory-policy", "allkeys-lru"], stdout=subprocess.DEVNULL),
        "pion": subprocess.Popen([sys.executable, "-m", "pion.server", "--port", str(ports["pion"]),
                                  "--dir", str(tmp / "p1"), "--maxmemory", str(budget),
                                  "--maxmemory-policy", "allkeys-lru"], stdout=subprocess.DEVNULL),
        "pion-unbounded": subprocess.Popen([sys.executable, "-m", "pion.server", "--port",
                                            str(ports["pion-unbounded"]), "--dir", str(tmp / "p2")],
                                           stdout=subprocess.DEVNULL),
    }
    results = {}
    try:
        for port in ports.values():
            wait_for_ping(port)
        for name, port in ports.items():
            results[name] = bench(port, procs[name].pid, args.n, args.keyspace)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"Part 2: redis-benchmark -t set,get -n {args.n} -r {args.keyspace} -d 1000 -P 16 -c 20; "
          f"--maxmemory {args.budget_mb} MB allkeys-lru (working set ~{args.keyspace * 1100 // 1024**2} MB)\n")
    print("| server | SET ops/s | SET CPU µs/req | GET ops/s | GET CPU µs/req | SET CPU ÷ Redis |")
    print("|---|---:|---:|---:|---:|---:|")
    redis_set_cpu = results["redis"]["set"][1]
    for name, res in results.items():
        print(f"| {name} | {res['set'][0]:,.0f} | {res['set'][1]:.2f} | {res['get'][0]:,.0f} | "
              f"{res['get'][1]:.2f} | {res['set'][1] / redis_set_cpu:.2f}× |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=200_000, help="part 1 trace length")
    parser.add_argument("--universe", type=int, default=50_000, help="part 1 distinct keys")
    parser.add_argument("--cache-frac", type=float, default=0.1, help="part 1 cache size, fraction of keys")
    parser.add_argument("-n", type=int, default=100_000, help="part 2 requests per test")
    parser.add_argument("--keyspace", type=int, default=100_000, help="part 2 distinct keys (-r)")
    parser.add_argument("--budget-mb", type=int, default=20, help="part 2 --maxmemory")
    args = parser.parse_args()
    part1(args)
    part2(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
