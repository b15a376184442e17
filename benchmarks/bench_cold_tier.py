"""Cold tier on Redis Cluster: restore of a SmolLM2-shaped 2K-token prefix, warm vs cold, and
aggregate cold-restore throughput with 1, 2, 3 pion-server fronts sharing one cluster.

Shape: 30 layers, kv_dim 192 (SmolLM2-135M: 3 KV heads x 64), K and V, random fp16 rows.

  warm restore  on the front that holds it: KV.PREFIX.LOOKUP + V.MFETCH _pk 0 30 + V.MFETCH _pv
                (one pipeline, one round trip)
  cold restore  on a front that does not: the same commands; LOOKUP reads the cold index (one
                round trip), reads the 60 layer strings (one pipeline, one shard: the {ns} slot)
                and promotes them into the warm tier, then the MFETCHes are served warm.
                Between repeats V.DROP removes the front's warm copy only (the cold copy stays).
  store         REGISTER + 60 V.STOREBATCH pipelined, on a front without a cold tier, with
                write-through and with write-behind (median of 3)
  cold prefill  (--prefill) SmolLM2-135M's forward over the 2048 tokens (1 torch thread), one run.
  throughput    8 client threads, each with its own 512-token prefix of the same 30x192 shape,
                spread over N fronts, each doing cold restores (LOOKUP, 2x MFETCH, V.DROP) for
                --seconds; restores/s and GB/s of fetched rows over all clients.

A 3-master Redis Cluster (no replicas) and the fronts run on this machine beside the client, so
the absolute numbers measure one shared 2-core box: the point is the shape (cold vs warm, how
the aggregate moves with fronts) and that nothing breaks. Run (about a minute):

  .venv/bin/python benchmarks/bench_cold_tier.py [--repeat 5] [--seconds 4] [--prefill]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_prefix_restore import free_port, wait_ping  # noqa: E402  (the same server helpers)
from support.redis_cluster import cluster_tools_missing, start_cluster  # noqa: E402

N_LAYERS, KV_DIM = 30, 192
CLIENTS = 8


def start_front(data_dir: Path, *args: str) -> tuple[int, subprocess.Popen[bytes]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", str(port), "--dir", str(data_dir),
                             "--max-sessions", "4096", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ping(port, proc)
    return port, proc


def prefix_rows(tokens: int, seed: int) -> list[bytes]:
    """The 60 layer blobs (K layers then V layers), made once so stores time only the store."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((tokens, KV_DIM)).astype(np.float16).tobytes() for _ in range(2 * N_LAYERS)]


def store_prefix(conn: redis.Redis, ns: str, blobs: list[bytes]) -> int:
    """Register and write all 60 layers (write-through: acknowledged once the cluster has them)."""
    pipe = conn.pipeline(transaction=False)
    pipe.execute_command("KV.PREFIX.REGISTER", ns, KV_DIM, "fp16", "LAYERS", N_LAYERS)
    for i, blob in enumerate(blobs):
        side, layer = ("pk", "pv")[i // N_LAYERS], i % N_LAYERS
        pipe.execute_command("V.STOREBATCH", f"{ns}_{side}", layer, 0, blob, "DTYPE", "f16")
    pipe.execute()
    return sum(len(b) for b in blobs)


def restore(conn: redis.Redis, ns: str, tokens: int) -> int:
    pipe = conn.pipeline(transaction=False)
    pipe.execute_command("KV.PREFIX.LOOKUP", ns)
    for side in ("pk", "pv"):
        pipe.execute_command("V.MFETCH", f"{ns}_{side}", 0, N_LAYERS, "RANGE", 0, tokens, "DTYPE", "f16")
    hit, k, v = pipe.execute()
    if hit != b"HIT":
        raise RuntimeError(f"restore of {ns} answered {hit!r}")
    return sum(len(b) for b in k) + sum(len(b) for b in v)


def forget_warm(conn: redis.Redis, ns: str) -> None:
    conn.execute_command("V.DROP", f"{ns}_pk", f"{ns}_pv")


def median_s(fn: Callable[[], object], repeat: int, before: Callable[[], object] | None = None) -> float:
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(ports: list[int], tokens: int, seconds: float) -> tuple[float, float]:
    """(restores/s, GB/s) of CLIENTS threads doing cold restores against the fronts round-robin."""
    counts = [0] * CLIENTS
    moved = [0] * CLIENTS
    stop = threading.Event()
    errors: list[BaseException] = []

    def client(i: int) -> None:
        conn = redis.Redis(port=ports[i % len(ports)], socket_timeout=60)
        ns = f"tp-{i}"
        try:
            while not stop.is_set():
                moved[i] += restore(conn, ns, tokens)
                forget_warm(conn, ns)
                counts[i] += 1
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]!r}")
    return sum(counts) / elapsed, sum(moved) / elapsed / 1e9


def cold_prefill_s(tokens: int) -> float:
    import torch

    from pion import load_model
    from pion.client.runtimes.transformers_runtime import forward_logits

    torch.set_num_threads(1)  # as the TTFT benchmarks: 2 threads are slower on this shared box
    model, _ = load_model("smollm2-135m", device="cpu")
    ids = list(np.random.default_rng(0).integers(100, 40000, tokens))
    forward_logits(model, ids[:16], None)  # warm-up
    t0 = time.perf_counter()
    forward_logits(model, ids, None)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--tp-tokens", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--prefill", action="store_true", help="also time SmolLM2's cold prefill")
    args = parser.parse_args()
    if (missing := cluster_tools_missing()) is not None:
        print(f"skipped: {missing}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        cluster = start_cluster(base / "cluster", masters=3, replicas=0)
        fronts = []
        try:
            fronts = [start_front(base / f"front-{i}", "--cold-tier", cluster.url) for i in range(3)]
            fronts.append(start_front(base / "behind", "--cold-tier", cluster.url, "--cold-tier-mode", "behind"))
            fronts.append(start_front(base / "alone"))  # no cold tier: the baseline for stores
            a, b = (redis.Redis(port=p, socket_timeout=60) for p, _ in fronts[:2])
            behind, alone = (redis.Redis(port=p, socket_timeout=60) for p, _ in fronts[3:])
            blobs = prefix_rows(args.tokens, 0)
            stores = {}
            for name, conn in (("no cold tier", alone), ("write-through", a), ("write-behind", behind)):
                stores[name] = median_s(lambda: store_prefix(conn, f"store-{name}", blobs), 3,
                                        before=lambda: conn.execute_command("KV.PREFIX.DROP", f"store-{name}"))
            nbytes = store_prefix(a, "bench", blobs)
            warm = median_s(lambda: restore(a, "bench", args.tokens), args.repeat)
            cold = median_s(lambda: restore(b, "bench", args.tokens), args.repeat,
                            before=lambda: forget_warm(b, "bench"))
            print(f"restore of a {args.tokens}-token prefix ({N_LAYERS} layers x kv_dim {KV_DIM}, fp16, "
                  f"{nbytes / 1e6:.1f} MB), median of {args.repeat}:")
            print(f"  warm tier (front holds it)        {warm * 1e3:8.1f} ms")
            print(f"  cold tier (cluster -> promote)    {cold * 1e3:8.1f} ms   ({cold / warm:.1f}x warm)")
            print(f"store of the same prefix (REGISTER + 60 V.STOREBATCH, pipelined), median of 3:")
            for name, seconds in stores.items():
                print(f"  {name:<32} {seconds * 1e3:8.1f} ms   ({seconds / stores['no cold tier']:.1f}x)")
            if args.prefill:
                prefill = cold_prefill_s(args.tokens)
                print(f"  cold prefill (SmolLM2-135M, CPU)  {prefill * 1e3:8.1f} ms   "
                      f"({prefill / cold:.1f}x the cold-tier restore)")
            for i in range(CLIENTS):
                store_prefix(a, f"tp-{i}", prefix_rows(args.tp_tokens, 100 + i))
                forget_warm(a, f"tp-{i}")
            print(f"\naggregate cold restores, {CLIENTS} clients, {args.tp_tokens}-token prefixes "
                  f"({2 * N_LAYERS * args.tp_tokens * KV_DIM * 2 / 1e6:.1f} MB each), {args.seconds:.0f} s each:")
            for n in (1, 2, 3):
                rate, gbps = throughput([p for p, _ in fronts[:n]], args.tp_tokens, args.seconds)
                print(f"  {n} front(s)   {rate:7.1f} restores/s   {gbps:6.2f} GB/s")
        finally:
            for _, proc in fronts:
                proc.terminate()
                proc.wait(timeout=30)
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
