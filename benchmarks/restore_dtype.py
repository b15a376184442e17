"""Which wire form restores a quantized prefix faster: server-decoded ``DTYPE f16`` or ``raw`` + client decode?

PionPromptCache's ``restore_dtype="auto"`` is set from this measurement. For each format, a
2048-token prefix of SmolLM2-135M's shape (30 layers, kv_dim 192, K and V) is stored once, then
restored both ways, interleaved, median of ``--repeat``: one pipelined round trip of two V.MFETCH
(all layers of each side), then per layer the float tensor the cache needs (a zero-copy fp16 view
for ``f16``; ``pion.codecs`` decode to fp32 for ``raw``).

    .venv/bin/python benchmarks/restore_dtype.py [--repeat 5] [--port P]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pion import PionClient
from pion.client.runtimes.transformers_kv import frombuffer
from pion.codecs import get_codec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_workload import start_server

N_LAYERS, KV_DIM, N_TOKENS = 30, 192, 2048
FORMATS = ["int8", "fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"]


def restore(client: PionClient, ns: str, fmt: str, wire: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    pipe = client.pipeline()
    pipe.v_mfetch(f"{ns}_pk", 0, N_LAYERS, 0, N_TOKENS, dtype=wire)  # type: ignore[arg-type]
    pipe.v_mfetch(f"{ns}_pv", 0, N_LAYERS, 0, N_TOKENS, dtype=wire)  # type: ignore[arg-type]
    sides = pipe.execute()
    nbytes = 0
    codec = get_codec(fmt)
    for layers in sides:
        for data in layers:
            nbytes += len(data)
            if wire == "f16":
                frombuffer(data, torch.float16)
            else:
                torch.from_numpy(codec.decode(data, KV_DIM, np.float32))
    return (time.perf_counter() - t0) * 1e3, nbytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    torch.set_num_threads(1)
    proc, tmp, port = None, None, args.port
    if port is None:
        tmp = tempfile.TemporaryDirectory(prefix="pion-restore-dtype-")
        proc, port = start_server(tmp.name)
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((N_TOKENS, KV_DIM)).astype(np.float16).tobytes()
    try:
        client = PionClient(port=port)
        print("| format | f16 bytes | f16 restore | raw bytes | raw restore + client decode | faster |")
        print("|---|---:|---:|---:|---:|---|")
        for fmt in FORMATS:
            ns = f"restore-dtype-{fmt}"
            client.kv_prefix_drop(ns)
            pipe = client.pipeline()
            pipe.kv_prefix_register(ns, KV_DIM, fmt, layers=N_LAYERS)
            for side in ("pk", "pv"):
                for layer in range(N_LAYERS):
                    pipe.v_storebatch(f"{ns}_{side}", layer, 0, rows, dtype="f16")
            pipe.execute()
            f16, raw = [], []
            for _ in range(args.repeat):
                f16.append(restore(client, ns, fmt, "f16"))
                raw.append(restore(client, ns, fmt, "raw"))
            f16_ms, raw_ms = statistics.median(t for t, _ in f16), statistics.median(t for t, _ in raw)
            print(f"| {fmt} | {f16[0][1] / 1e6:.1f} MB | {f16_ms:.0f} ms | {raw[0][1] / 1e6:.1f} MB | {raw_ms:.0f} ms | "
                  f"{'f16' if f16_ms <= raw_ms else 'raw'} ({max(f16_ms, raw_ms) / min(f16_ms, raw_ms):.2f}x) |",
                  flush=True)
            client.kv_prefix_drop(ns)
        client.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
