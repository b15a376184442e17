"""LMCache's engine on CPU against pion-server: its plain ``redis://`` path vs the Pion plugin.

Same engine, same request, same server program, one run: for each path a fresh pion-server, one
worker process stores ``--tokens`` tokens of K/V (SmolLM2-135M's geometry by default: 30 layers x
3 KV heads x 64, fp16, LMCache chunks of 256), then a *fresh* worker process retrieves them
``--repeat`` times (LMCache's local CPU tier off, so every retrieve reads pion-server; median).
Bytes stored are the server's own accounting (``INFO`` keyspace_bytes + ``KV.PREFIX.INFO``
vstore_bytes). The workers are tests/integrations/lmcache_worker.py in the lmcache venv.

    PION_LMCACHE_PYTHON=/path/to/lmcache-venv/bin/python \
        PYTHONPATH=src .venv/bin/python benchmarks/bench_lmcache_remote.py [--tokens 2048] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis

from pion.client.connection import PionClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_workload import start_server

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "integrations" / "lmcache_worker.py"
PATHS = [("redis:// (LMCache RedisConnector)", "redis", "auto"), ("pion plugin fp16", "pion", "fp16"),
         ("pion plugin int8", "pion", "int8"), ("pion plugin fp8", "pion", "fp8")]


def worker(python: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTHONHASHSEED": "0"}
    proc = subprocess.run([python, str(WORKER), *args], capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args[0]} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_path(python: str, scheme: str, vquant: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(tmp)
        try:
            common = ["--url", f"{scheme}://127.0.0.1:{port}", "--tokens", str(args.tokens), "--geometry",
                      args.geometry, "--vquant", vquant]
            stored = worker(python, "store", *common)
            client = PionClient("127.0.0.1", port)
            keyspace_bytes = int(redis.Redis(port=port).info("memory")["keyspace_bytes"])
            vstore_bytes = int(client.kv_prefix_info()["vstore_bytes"])
            retrieved = worker(python, "retrieve", *common, "--repeat", str(args.repeat))
            stats = client.pion_stats()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return {"stored_bytes": keyspace_bytes + vstore_bytes,
            "store_s": stored["seconds"], "retrieve_s": retrieved["seconds"],
            "retrieved": retrieved["retrieved_tokens"], "bit_exact": retrieved["bit_exact"],
            "max_abs_err": retrieved["max_abs_err"], "bytes_served": int(stats["kvprefix_bytes_served"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--geometry", default="30,3,64", help="n_layers,n_kv_heads,head_dim")
    args = parser.parse_args()
    python = os.environ.get("PION_LMCACHE_PYTHON")
    if not python:
        sys.exit("set PION_LMCACHE_PYTHON to the python of a venv with lmcache==0.5.6")
    rows = [(label, run_path(python, scheme, vquant, args)) for label, scheme, vquant in PATHS]
    base = rows[0][1]
    print(f"\n{args.tokens} tokens, geometry {args.geometry}, fp16 K/V, LMCache chunk 256, retrieve median of "
          f"{args.repeat}\n")
    print("| path | bytes stored | vs redis:// | store | retrieve (median) | vs redis:// | retrieved | bit-exact | max abs err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, r in rows:
        print(f"| {label} | {r['stored_bytes']:,} | {r['stored_bytes'] / base['stored_bytes']:.2f}x | "
              f"{r['store_s'] * 1e3:.0f} ms | {r['retrieve_s'] * 1e3:.1f} ms | "
              f"{r['retrieve_s'] / base['retrieve_s']:.2f}x | {r['retrieved']} | {r['bit_exact']} | "
              f"{r['max_abs_err']:.3g} |")


if __name__ == "__main__":
    main()
