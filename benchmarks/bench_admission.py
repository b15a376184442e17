"""KV.PREFIX.REGISTER admission: ``--admission always`` vs ``2hit`` on a trace of one-off and repeating prefixes.

The trace (issue 14): ``--requests`` requests, 70 % of them a prefix never seen before (a unique
conversation) and 30 % drawn from ``--pool`` repeating prefixes with zipf(``--zipf``) popularity.
pion-server's ``--maxmemory`` holds 20 % of the trace's distinct prefixes. Each request is what
PionPromptCache does: KV.PREFIX.LOOKUP; on a hit, restore (V.MFETCH both sides); on a miss,
store through ``PrefixTransport.store`` (register first; rows only when admitted). Both servers
get the same trace in the same run.

Reported per policy: hit rate (all requests, and the repeating ones alone, whose hits are the
ones there are to win), prefixes stored, row bytes written to the server, WAL bytes, and the
prefixes held at the end.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_admission.py [--requests 4000] [--pool 200]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pion import PionClient
from pion.client.prefix_transport import LayerFormats, PrefixTransport, stacked_rows
from pion.client.runtimes.transformers_kv import KvShape

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_workload import start_server  # the benchmarks' one server starter, imported after the path

SHAPE = KvShape(n_layers=2, n_kv_heads=2, head_dim=32)  # kv_dim 64
N_TOKENS = 32  # fp16: 2 sides x 2 layers x 32 tokens x 64 x 2 B = 16 KiB per prefix
PREFIX_BYTES = 2 * SHAPE.n_layers * N_TOKENS * SHAPE.kv_dim * 2


def make_trace(n_requests: int, pool: int, zipf_s: float, one_off_share: float, seed: int) -> list[tuple[str, bool]]:
    """(namespace, repeating?) per request; one-off namespaces are unique, repeating ones zipf-drawn."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, pool + 1) ** zipf_s
    weights /= weights.sum()
    trace: list[tuple[str, bool]] = []
    for i in range(n_requests):
        if rng.random() < one_off_share:
            trace.append((f"once-{i}", False))
        else:
            trace.append((f"hot-{int(rng.choice(pool, p=weights))}", True))
    return trace


@dataclass
class Result:
    hits: int = 0
    repeat_requests: int = 0
    repeat_hits: int = 0
    stored: int = 0
    deferred: int = 0
    row_bytes: int = 0
    wal_bytes: int = 0
    held: int = 0
    seconds: float = 0.0


def start(policy: str, maxmemory: int, data_dir: str) -> tuple[subprocess.Popen[bytes], int]:
    return start_server(data_dir, "--binary-port", "0", "--admission", policy, "--maxmemory", str(maxmemory),
                        "--max-sessions", "1000000", "--appendfsync", "no")


def info(client: PionClient) -> dict[str, int]:
    text = client.redis.execute_command("KV.PREFIX.INFO").decode()
    return {k: int(v) for k, v in (line.split(":") for line in text.split("\r\n") if line)}


def run(policy: str, trace: list[tuple[str, bool]], maxmemory: int) -> Result:
    gen = torch.Generator().manual_seed(0)
    dims = (SHAPE.n_layers, SHAPE.n_kv_heads, N_TOKENS, SHAPE.head_dim)
    rows = stacked_rows(torch.randn(dims, generator=gen), torch.randn(dims, generator=gen))
    result = Result()
    with tempfile.TemporaryDirectory(prefix=f"pion-admission-{policy}-") as data_dir:
        proc, port = start(policy, maxmemory, data_dir)
        try:
            with PionClient(port=port) as client:
                transport = PrefixTransport(client, SHAPE, LayerFormats.uniform("fp16", SHAPE.n_layers))
                wal_before = info(client)["wal_bytes"]
                t0 = time.perf_counter()
                for ns, repeating in trace:
                    result.repeat_requests += repeating
                    if client.kv_prefix_lookup(ns):
                        transport.restore(ns, N_TOKENS)
                        result.hits += 1
                        result.repeat_hits += repeating
                        continue
                    outcome = transport.store(ns, rows)
                    if outcome.errors:
                        raise RuntimeError(f"store {ns} failed: {outcome.errors[0]}")
                    result.deferred += outcome.deferred
                    result.stored += not outcome.deferred
                    result.row_bytes += outcome.nbytes
                result.seconds = time.perf_counter() - t0
                final = info(client)
                result.wal_bytes = final["wal_bytes"] - wal_before
                result.held = final["registered_prefixes"]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--pool", type=int, default=200, help="repeating prefixes (zipf-popular)")
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--one-off", type=float, default=0.7, help="share of one-off requests")
    parser.add_argument("--budget-share", type=float, default=0.2, help="share of distinct prefixes the budget holds")
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    torch.set_num_threads(1)
    trace = make_trace(args.requests, args.pool, args.zipf, args.one_off, args.seed)
    distinct = len({ns for ns, _ in trace})
    capacity = int(args.budget_share * distinct)
    maxmemory = capacity * PREFIX_BYTES
    print(f"trace: {len(trace)} requests, {distinct} distinct prefixes "
          f"({sum(not r for _, r in trace)} one-off requests), {PREFIX_BYTES} B per prefix; "
          f"--maxmemory {maxmemory} = {capacity} prefixes ({args.budget_share:.0%})\n")
    results = {policy: run(policy, trace, maxmemory) for policy in ("always", "2hit")}
    print("| policy | hit rate | hit rate, repeating requests | prefixes stored | deferred | row bytes written "
          "| WAL bytes | held at end | time |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for policy, r in results.items():
        print(f"| `{policy}` | {r.hits / len(trace):.1%} | {r.repeat_hits / max(1, r.repeat_requests):.1%} | "
              f"{r.stored} | {r.deferred} | {r.row_bytes / 1e6:.1f} MB | {r.wal_bytes / 1e6:.1f} MB | {r.held} | "
              f"{r.seconds:.1f} s |")
    a, b = results["always"], results["2hit"]
    print(f"\n2hit / always: hit rate {b.hits / max(1, a.hits):.2f}x, row bytes written "
          f"{b.row_bytes / max(1, a.row_bytes):.2f}x")


if __name__ == "__main__":
    main()
