"""What the torch-free MLX path saves at start-up: ``import pion.mlx`` with and without torch loaded.

Each sample is a fresh interpreter (``python -c``) timing its own import, alternating the two
variants so machine load hits both alike; the median is reported:

* ``pion.mlx`` — what an MLX process now pays (the stage-1 path imports no torch);
* ``torch + pion.mlx`` — the baseline: what it paid while the shared transport imported torch
  (and what a process that also uses the transformers runtime still pays).

    .venv/bin/python benchmarks/bench_mlx_import.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = """
import json, sys, time
t = time.perf_counter()
{pre}
import pion.mlx
elapsed = time.perf_counter() - t
print(json.dumps({{"s": elapsed, "modules": len(sys.modules), "torch": sys.modules.get("torch") is not None}}))
"""
VARIANTS = {"pion.mlx": "", "torch + pion.mlx": "import torch"}


def sample(pre: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeats):
        for name, pre in VARIANTS.items():
            runs[name].append(sample(pre))
    base = statistics.median(r["s"] for r in runs["torch + pion.mlx"])
    print("| import | median s | modules loaded | torch loaded | vs baseline |")
    print("|---|---|---|---|---|")
    for name, samples in runs.items():
        med = statistics.median(r["s"] for r in samples)
        print(f"| `{name}` | {med:.2f} | {int(samples[-1]['modules'])} | {bool(samples[-1]['torch'])} | "
              f"{med / base:.2f}x |")


if __name__ == "__main__":
    main()
