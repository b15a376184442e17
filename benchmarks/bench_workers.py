"""pion-server -w 1 vs -w 2 in one run: small-op ops/s, concurrent prefix restores, redirect cost.

1. Small ops: ``redis-benchmark -c 50 -P 16 -t ping,set,get -n N -d 3`` against the shared port
   of each server (connections spread over the workers by SO_REUSEPORT). Under -w 2, SET/GET
   reaching worker 1 are forwarded to worker 0 (the keyspace's owner; docs/workers.md).
2. Concurrent restores: 4 client processes, each with its own prefix of ``--tokens`` tokens of
   SmolLM2-135M geometry (30 layers, kv_dim 192, fp16: 2 V.MFETCH of 11.8 MB each per restore),
   registered through the connection it restores on: under -w 2 clients 0,2 use worker 0's
   address and 1,3 worker 1's. Every client restores in a loop for ``--seconds``; total restores/s.
3. Redirect cost (-w 2): a fresh ``PionStore`` restoring every layer of a prefix (60 fetch_layer),
   connected first to the wrong worker (one redirect: reconnect + retry) vs to the owner.
4. Forwarded pipelines (``--forwarding``; issue 14's follow-up): ``redis-benchmark -P 16 -t set,get``
   against worker 1's own address of ``-w 2`` (every command forwarded to worker 0), with
   ``--worker-forward-batch 1`` (each client's pipeline forwarded one command at a time, the
   behaviour before) vs the default (a client's run of forwarded commands sent as one batch),
   at -c 1 and -c 50; worker 0's own address (nothing forwarded) as the reference.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_workers.py [-n 200000] [--tokens 2048] [--seconds 5]
    PYTHONPATH=src .venv/bin/python benchmarks/bench_workers.py --forwarding [-n 100000]
"""

from __future__ import annotations

import argparse
import csv
import io
import multiprocessing as mp
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

from pion.lmcache import PionStore

N_LAYERS, KV_DIM = 30, 192


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(workers: int, data_dir: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int, list[int]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", str(port), "--dir", str(data_dir),
                             "-w", str(workers), "--worker-port-base", "0", "--max-sessions", "64", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with redis.Redis(port=port, socket_timeout=5) as conn:
                reply = conn.execute_command("PION.WORKER")
                fields = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
                ports = [int(a.decode().rsplit(":", 1)[1]) for a in fields[b"addresses"]]
                wait_listening(ports, deadline)
                return proc, port, ports
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def wait_listening(ports: list[int], deadline: float) -> None:
    """Wait until every worker's own address accepts: the shared port answers as soon as one worker
    listens, and redis-benchmark 7.0 spins forever on an address refused at its start."""
    for port in ports:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def small_ops(port: int, n: int, tests: str = "ping,set,get", clients: int = 50) -> dict[str, float]:
    done = subprocess.run(["redis-benchmark", "-p", str(port), "-t", tests, "-n", str(n), "-d", "3",
                           "-c", str(clients), "-P", "16", "--csv"], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"redis-benchmark failed ({done.returncode}): {done.stdout[-500:]} {done.stderr[-500:]}")
    out = done.stdout
    return {r[0]: float(r[1]) for r in csv.reader(io.StringIO(out)) if r and r[0] != "test"}


def forwarding(n: int, tmp: Path) -> int:
    """Section 4 of the module docstring: one -w 2 server per batch setting, measured in turn."""
    rows: dict[str, dict[str, float]] = {}
    for label, extra in (("batch 1", ("--worker-forward-batch", "1")), ("batched", ("--worker-forward-batch", "1024"))):
        proc, _, ports = start(2, tmp / label.replace(" ", ""), *extra)
        try:
            for clients in (1, 50):
                for test, value in small_ops(ports[1], n, "set,get", clients).items():
                    rows.setdefault(f"{test} -c {clients} via worker 1", {})[label] = value
                if label == "batched":
                    for test, value in small_ops(ports[0], n, "set,get", clients).items():
                        rows[f"{test} -c {clients} via worker 1"]["worker 0"] = value
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(f"redis-benchmark -P 16 -n {n} -d 3 -t set,get against -w 2's worker addresses\n")
    print("| measure (ops/s) | one at a time (--worker-forward-batch 1) | batched (default) | batched ÷ one at a time "
          "| worker 0's own address (not forwarded) |")
    print("|---|---|---|---|---|")
    for key, row in rows.items():
        print(f"| {key} | {row['batch 1']:,.0f} | {row['batched']:,.0f} | {row['batched'] / row['batch 1']:.2f}× "
              f"| {row['worker 0']:,.0f} |")
    return 0


def restore_client(port: int, ns: str, tokens: int, seconds: float, start_at: float, out: mp.Queue) -> None:
    conn = redis.Redis(port=port, socket_timeout=60)
    rows = np.random.default_rng(0).standard_normal((tokens, KV_DIM)).astype(np.float16).tobytes()
    pipe = conn.pipeline(transaction=False)
    pipe.execute_command("KV.PREFIX.REGISTER", ns, KV_DIM, "fp16", "LAYERS", N_LAYERS)
    for side in ("_pk", "_pv"):
        for layer in range(N_LAYERS):
            pipe.execute_command("V.STOREBATCH", ns + side, layer, 0, rows, "DTYPE", "f16")
    pipe.execute()
    time.sleep(max(0.0, start_at - time.time()))
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pipe = conn.pipeline(transaction=False)
        pipe.execute_command("V.MFETCH", ns + "_pk", 0, N_LAYERS, "RANGE", 0, tokens, "DTYPE", "raw")
        pipe.execute_command("V.MFETCH", ns + "_pv", 0, N_LAYERS, "RANGE", 0, tokens, "DTYPE", "raw")
        k, v = pipe.execute()
        assert len(k) == N_LAYERS and len(k[0]) == tokens * KV_DIM * 2
        done += 1
    out.put(done)
    conn.close()


def concurrent_restores(ports: list[int], tokens: int, seconds: float, tag: str) -> float:
    ctx = mp.get_context("fork")
    queue: mp.Queue = ctx.Queue()
    start_at = time.time() + 8.0  # every client has stored its prefix by then
    procs = [ctx.Process(target=restore_client, args=(ports[i % len(ports)], f"bench|{tag}|{i}", tokens, seconds,
                                                      start_at, queue)) for i in range(4)]
    for p in procs:
        p.start()
    total = sum(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def redirect_cost(ports: list[int], tokens: int, trials: int) -> tuple[float, float]:
    rows = np.random.default_rng(1).standard_normal((tokens, KV_DIM)).astype(np.float32)
    with PionStore(port=ports[0], vquant="fp16") as owner:
        owner.register("bench|redirect", KV_DIM, n_layers=N_LAYERS)
        for layer in range(N_LAYERS):
            for side in ("K", "V"):
                owner.store_layer("bench|redirect", side, layer=layer, token_offset=0, tensor_fp32=rows)
    timings: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(trials):
        for first in (1, 0):  # interleaved: wrong worker first, then right
            started = time.perf_counter()
            with PionStore(port=ports[first], vquant="fp16") as store:
                for layer in range(N_LAYERS):
                    for side in ("K", "V"):
                        store.fetch_layer("bench|redirect", side, layer=layer, start=0, end=tokens)
                assert store.redirects == (1 if first == 1 else 0)
            timings[first].append((time.perf_counter() - started) * 1e3)
    return statistics.median(timings[1]), statistics.median(timings[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200_000, help="redis-benchmark requests per test")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--forwarding", action="store_true",
                        help="only section 4: forwarded pipelines, batched vs one command at a time")
    args = parser.parse_args()
    if shutil.which("redis-benchmark") is None:
        print("redis-benchmark not found: apt-get install redis-tools", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    if args.forwarding:
        try:
            return forwarding(args.n, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    results: dict[int, dict[str, float]] = {}
    redirect = (0.0, 0.0)
    try:
        for workers in (1, 2):
            proc, port, ports = start(workers, tmp / f"w{workers}")
            try:
                results[workers] = small_ops(port, args.n)
                results[workers]["restores/s"] = concurrent_restores(ports, args.tokens, args.seconds, f"w{workers}")
                if workers == 2:
                    redirect = redirect_cost(ports, args.tokens, args.trials)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"redis-benchmark -c 50 -P 16 -n {args.n} -d 3; restores: 4 clients x {args.tokens}-token fp16 "
          f"prefixes ({N_LAYERS} layers, kv_dim {KV_DIM}), {args.seconds:.0f} s\n")
    print("| measure | -w 1 | -w 2 | -w 2 ÷ -w 1 |")
    print("|---|---|---|---|")
    for key in results[1]:
        one, two = results[1][key], results[2][key]
        print(f"| {key} | {one:,.1f} | {two:,.1f} | {two / one:.2f}× |")
    wrong, right = redirect
    print(f"\nRedirect cost (-w 2, PionStore restoring {N_LAYERS}x2 layers of {args.tokens} tokens, median of "
          f"{args.trials}): wrong worker first {wrong:.1f} ms, right worker {right:.1f} ms, "
          f"cost {wrong - right:+.1f} ms ({wrong / right:.2f}×)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
