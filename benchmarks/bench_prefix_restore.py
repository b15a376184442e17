"""Store and restore a 2048-token prefix of SmolLM2-135M's shape: Pion V-store vs Redis SET/GET.

Shape: 30 layers, kv_dim 192 (3 KV heads x 64), K and V, fp16 -> 30 x 2 x 2048 x 192 x 2 B = 47.2 MB.

  Pion store    KV.PREFIX.DROP + REGISTER ... LAYERS 30 + 60 V.STOREBATCH ... DTYPE f16, pipelined (fresh)
  Pion restore  V.MFETCH <ns>_pk 0 30 RANGE 0 2048 DTYPE f16, same for _pv (2 commands, 1 round trip)
  Redis store   60 SET of the same per-layer blobs, pipelined
  Redis restore 60 GET, pipelined (1 round trip); MGET of each side's 30 keys is shown too

Both servers run side by side on this machine, both driven by redis-py (hiredis parser),
each phase repeated (Pion and Redis interleaved) and the median reported. Run:

  .venv/bin/python benchmarks/bench_prefix_restore.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import redis

N_LAYERS, KV_DIM, N_TOKENS = 30, 192, 2048


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ping(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return
        except redis.RedisError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not answer PING")


def medians_s(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """Median seconds of each function, run interleaved so both servers see the same machine load."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, bucket in zip(fns, times, strict=True):
            t0 = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - t0)
    return [statistics.median(bucket) for bucket in times]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        print("redis-server not found: apt-get install -y redis-server", file=sys.stderr)
        return 2

    rng = np.random.default_rng(0)
    blobs = {side: [rng.standard_normal((N_TOKENS, KV_DIM)).astype("<f2").tobytes() for _ in range(N_LAYERS)]
             for side in ("k", "v")}
    total = sum(len(b) for side in blobs.values() for b in side)

    tmp = Path(tempfile.mkdtemp(prefix="bench-prefix-"))
    pion_port, redis_port, aof_port = free_port(), free_port(), free_port()
    procs = [
        subprocess.Popen([sys.executable, "-m", "pion.server", "--port", str(pion_port), "--dir", str(tmp / "pion"),
                          "--loglevel", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([redis_server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", str(tmp)], stdout=subprocess.DEVNULL),
        # Pion logs every STOREBATCH to its WAL (default everysec): the like-for-like store baseline.
        subprocess.Popen([redis_server, "--port", str(aof_port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "yes", "--appendfsync", "everysec", "--appendfilename", "bench.aof",
                          "--dir", str(tmp)], stdout=subprocess.DEVNULL),
    ]
    try:
        wait_ping(pion_port, procs[0])
        wait_ping(redis_port, procs[1])
        wait_ping(aof_port, procs[2])
        pion = redis.Redis(port=pion_port)
        red = redis.Redis(port=redis_port)
        red_aof = redis.Redis(port=aof_port)

        def pion_store() -> None:
            pipe = pion.pipeline(transaction=False)
            pipe.execute_command("KV.PREFIX.DROP", "bench")  # each repetition stores a fresh prefix
            pipe.execute_command("KV.PREFIX.REGISTER", "bench", KV_DIM, "fp16", "LAYERS", N_LAYERS)
            for side, suffix in (("k", "_pk"), ("v", "_pv")):
                for layer, blob in enumerate(blobs[side]):
                    pipe.execute_command("V.STOREBATCH", "bench" + suffix, layer, 0, blob, "DTYPE", "f16")
            pipe.execute()

        def pion_restore() -> list[list[bytes]]:
            pipe = pion.pipeline(transaction=False)
            for suffix in ("_pk", "_pv"):
                pipe.execute_command("V.MFETCH", "bench" + suffix, 0, N_LAYERS, "RANGE", 0, N_TOKENS, "DTYPE", "f16")
            return pipe.execute()  # type: ignore[no-any-return]

        def redis_store(client: redis.Redis = red) -> None:
            pipe = client.pipeline(transaction=False)
            for side in ("k", "v"):
                for layer, blob in enumerate(blobs[side]):
                    pipe.set(f"bench:{side}:{layer}", blob)
            pipe.execute()

        def redis_aof_store() -> None:
            redis_store(red_aof)

        def redis_get() -> list[bytes]:
            pipe = red.pipeline(transaction=False)
            for side in ("k", "v"):
                for layer in range(N_LAYERS):
                    pipe.get(f"bench:{side}:{layer}")
            return pipe.execute()  # type: ignore[no-any-return]

        def redis_mget() -> list[list[bytes]]:
            pipe = red.pipeline(transaction=False)
            for side in ("k", "v"):
                pipe.mget([f"bench:{side}:{layer}" for layer in range(N_LAYERS)])
            return pipe.execute()  # type: ignore[no-any-return]

        pion_store()
        redis_store()
        restored = pion_restore()
        if restored != [blobs["k"], blobs["v"]] or redis_get() != blobs["k"] + blobs["v"]:
            raise RuntimeError("restored bytes differ from stored bytes")
        assert pion.execute_command("KV.PREFIX.LOOKUP", "bench") == b"HIT"

        store_p, store_r, store_aof = medians_s([pion_store, redis_store, redis_aof_store], args.repeat)
        restore_p, restore_r, mget_s = medians_s([pion_restore, redis_get, redis_mget], args.repeat)
        results = {"store": (store_p, store_r), "restore": (restore_p, restore_r)}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=15)
        shutil.rmtree(tmp, ignore_errors=True)

    mb = total / 1e6
    print(f"prefix: {N_LAYERS} layers x K,V x {N_TOKENS} tokens x kv_dim {KV_DIM} fp16 = {mb:.1f} MB; "
          f"median of {args.repeat}")
    print()
    print("| phase | Pion | Pion MB/s | Redis (SET / pipelined GET) | Redis MB/s | Pion ÷ Redis |")
    print("|---|---|---|---|---|---|")
    for phase, (p_s, r_s) in results.items():
        print(f"| {phase} | {p_s * 1e3:.1f} ms | {mb / p_s:.0f} | {r_s * 1e3:.1f} ms | {mb / r_s:.0f} | "
              f"{r_s / p_s:.2f}× |")
    print(f"| store vs Redis AOF everysec | {store_p * 1e3:.1f} ms | {mb / store_p:.0f} | "
          f"{store_aof * 1e3:.1f} ms | {mb / store_aof:.0f} | {store_aof / store_p:.2f}× |")
    print(f"| restore vs Redis MGET | {results['restore'][0] * 1e3:.1f} ms | {mb / results['restore'][0]:.0f} | "
          f"{mget_s * 1e3:.1f} ms | {mb / mget_s:.0f} | {mget_s / results['restore'][0]:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
