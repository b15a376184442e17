"""Cold-tier consistency: what the pub/sub invalidation costs, and what a per-hit check would.

  warm LOOKUP      KV.PREFIX.LOOKUP of a prefix the front holds, one call at a time: on a front
                   without a cold tier (the baseline), and on a cold-tier front whose copy is
                   vouched for by its subscription (no cluster call on a hit)
  per-hit check    the round trip the alternative design would add to every warm hit: HGET of the
                   index's ``gen`` field on the prefix's shard, timed from the client machine
                   (the same loopback hop a front makes)
  DROP -> MISS     front A drops a prefix front B holds warm; the time from A's reply to B's
                   first +MISS (B polled with LOOKUP), i.e. the window in which B may still
                   answer +HIT from its copy

A 3-master Redis Cluster (no replicas) and the fronts run on this machine beside the client, so
the numbers measure one shared 2-core box. Run (about 30 s):

  .venv/bin/python benchmarks/bench_cold_tier_invalidation.py [--calls 2000] [--drops 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
from redis.cluster import ClusterNode, RedisCluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_cold_tier import start_front  # noqa: E402  (the same front start-up)
from support.redis_cluster import cluster_tools_missing, start_cluster  # noqa: E402

LAYERS, KV_DIM, TOKENS = 4, 192, 64


def store_prefix(conn: redis.Redis, ns: str) -> None:
    rows = np.random.default_rng(len(ns)).standard_normal((TOKENS, KV_DIM)).astype(np.float16).tobytes()
    pipe = conn.pipeline(transaction=False)
    pipe.execute_command("KV.PREFIX.REGISTER", ns, KV_DIM, "fp16", "LAYERS", LAYERS)
    for side in ("pk", "pv"):
        for layer in range(LAYERS):
            pipe.execute_command("V.STOREBATCH", f"{ns}_{side}", layer, 0, rows, "DTYPE", "f16")
    pipe.execute()


def per_call_us(fn: object, calls: int) -> float:
    assert callable(fn)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def drop_to_miss_ms(a: redis.Redis, b: redis.Redis, ns: str) -> float:
    store_prefix(a, ns)
    if b.execute_command("KV.PREFIX.LOOKUP", ns) != b"HIT":
        raise RuntimeError(f"front B did not promote {ns}")
    a.execute_command("KV.PREFIX.DROP", ns)
    t0 = time.perf_counter()
    while b.execute_command("KV.PREFIX.LOOKUP", ns) != b"MISS":
        if time.perf_counter() - t0 > 10:
            raise RuntimeError(f"front B still answers HIT for {ns} 10 s after the DROP")
    return (time.perf_counter() - t0) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--drops", type=int, default=20)
    opts = parser.parse_args()
    missing = cluster_tools_missing()
    if missing:
        print(f"skipped: {missing}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        cluster = start_cluster(base / "cluster", masters=3, replicas=0)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            ports = []
            for name, args in (("a", ["--cold-tier", cluster.url]), ("b", ["--cold-tier", cluster.url]),
                               ("plain", [])):
                port, proc = start_front(base / name, *args)
                ports.append(port)
                procs.append(proc)
            a, b, plain = (redis.Redis(port=p) for p in ports)
            time.sleep(1.0)  # the fronts' subscriptions come up in their own threads
            store_prefix(a, "bench-warm")
            store_prefix(plain, "bench-warm")
            assert b.execute_command("KV.PREFIX.LOOKUP", "bench-warm") == b"HIT"  # promoted
            seed = cluster.url.split("//", 1)[1].split(",")[0]
            host, port = seed.rsplit(":", 1)
            cc = RedisCluster(startup_nodes=[ClusterNode(host, int(port))])
            rows = [
                ("warm LOOKUP, front without a cold tier", per_call_us(
                    lambda: plain.execute_command("KV.PREFIX.LOOKUP", "bench-warm"), opts.calls)),
                ("warm LOOKUP, cold-tier front (subscribed: no cluster call)", per_call_us(
                    lambda: b.execute_command("KV.PREFIX.LOOKUP", "bench-warm"), opts.calls)),
                ("HGET of the index's gen (what a per-hit check adds)", per_call_us(
                    lambda: cc.hget("pion:{bench-warm}:idx", "gen"), opts.calls)),
            ]
            base_us = rows[0][1]
            print(f"| per call, {opts.calls} calls | µs (median) | vs the front without a cold tier |")
            print("|---|---|---|")
            for label, us in rows:
                print(f"| {label} | {us:.0f} | {us / base_us:.2f}× |")
            delays = [drop_to_miss_ms(a, b, f"bench-drop-{i}") for i in range(opts.drops)]
            print()
            print(f"| DROP on front A → first +MISS on front B ({opts.drops} drops) | ms |")
            print("|---|---|")
            print(f"| median | {statistics.median(delays):.2f} |")
            print(f"| max | {max(delays):.2f} |")
            stats = b.execute_command("PION.STATS")
            fields = stats if isinstance(stats, dict) else dict(zip(stats[::2], stats[1::2]))
            print(f"\nfront B coldtier_invalidations: {fields[b'coldtier_invalidations']}")
            cc.close()
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
