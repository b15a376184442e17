"""A PionPromptCache hit at a 2K-token prefix: zero-copy views (default) vs materialize=True.

The issue asked for restores "straight into preallocated tensors"; the default instead hands the
model fp16 views of the reply bytes and lets the first forward's ``torch.cat`` do the conversion.
This measures both on the same pion-server and prefix, interleaved: restore (lookup + fetch +
decode + cache build) and the suffix forward that follows, medians over ``--repeat`` rounds.

  .venv/bin/python benchmarks/restore_materialize.py [--tokens 2048] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pion import PionPromptCache, load_model
from pion.client.runtimes.transformers_runtime import forward_logits
from support.procs import start_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model()
    ids = tok.encode("The quick brown fox jumps over the lazy dog. " * (args.tokens // 8),
                     add_special_tokens=False)[:args.tokens]
    suffix = tok.encode(" What did the fox do?", add_special_tokens=False)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "data")
        try:
            caches = {m: PionPromptCache(model, "fp16", port=server.port, materialize=m) for m in (False, True)}
            ns = caches[False].namespace_for(ids)
            caches[False].get_or_prefill(ids, ns)  # the miss: prefill and store once
            runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for _ in range(args.repeat):
                for materialize, pc in caches.items():
                    t0 = time.perf_counter()
                    cache = pc.get_or_prefill(ids, ns)
                    t1 = time.perf_counter()
                    forward_logits(model, suffix, cache)
                    runs[materialize].append(((t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3))
            print(f"| {len(ids)}-token prefix, fp16 | restore | suffix forward | restore + forward |")
            print("|---|---:|---:|---:|")
            for materialize, rows in runs.items():
                restore = statistics.median(r for r, _ in rows)
                fwd = statistics.median(f for _, f in rows)
                total = statistics.median(r + f for r, f in rows)
                label = "materialize=True (preallocated fp32)" if materialize else "zero-copy views (default)"
                print(f"| {label} | {restore:.0f} ms | {fwd:.0f} ms | {total:.0f} ms |")
            for pc in caches.values():
                pc.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
