"""Thread thrash: pion-llm generation and the server-side embedder at 1, 2 and torch's default
intra-op threads, on an otherwise quiet machine and beside one competing CPU-bound process.

Why: torch sizes its intra-op pool to the machine's cores. When another process takes one of
them, OpenMP's barrier between threads waits for the descheduled one on every op, and a forward
pass slows by far more than the lost core (issue 24: 1.6 s -> 56 s for 37 + 30 tokens on 2 cores).

Each cell runs in a fresh process (the thread count is fixed before torch does any work); the
competitor is ``python -c "while True: pass"``. Workloads:

* llm: SmolLM2-135M as pion-llm runs it: a chat prompt through ``plan_chat``, then 30 greedy
  tokens (EOS ignored is not needed: the prompt asks for a long answer); the seconds for both.
* embed: all-MiniLM-L6-v2 (``MiniLMEmbedder.encode``) of one short text, ms per call, mean of 10.

    PYTHONPATH=src HF_HUB_OFFLINE=1 python benchmarks/bench_threads.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

PROMPT = "Explain in a few sentences how plants make their food from sunlight."
TEXT = "How do I reset my password?"
SETTINGS = ("1", "2", "default")
EMBED_CALLS = 10
GEN_TOKENS = 30


def worker(kind: str, threads: str) -> dict[str, float]:
    import torch

    if threads != "default":
        torch.set_num_threads(int(threads))
    if kind == "llm":
        from pion.client.runtimes.transformers_runtime import generate_steps, load_model
        from pion.llm.segments import plan_chat

        model, tok = load_model("smollm2-135m", device="cpu")
        ids = list(plan_chat(tok, [{"role": "user", "content": PROMPT}]).ids)
        list(generate_steps(model, tok, ids, max_tokens=4))  # warm-up, not timed
        started = time.perf_counter()
        n = sum(1 for _ in generate_steps(model, tok, ids, max_tokens=GEN_TOKENS))
        return {"seconds": time.perf_counter() - started, "prompt_tokens": len(ids), "generated": n,
                "threads": torch.get_num_threads()}
    from pion.server.semantic.embedder import MiniLMEmbedder

    embedder = MiniLMEmbedder(threads=None)  # keep the count set above
    embedder.encode([TEXT])  # load + warm-up, not timed
    started = time.perf_counter()
    for _ in range(EMBED_CALLS):
        embedder.encode([TEXT])
    return {"ms_per_call": (time.perf_counter() - started) * 1000.0 / EMBED_CALLS,
            "threads": torch.get_num_threads()}


def cell(kind: str, threads: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--worker", kind, "--threads", threads], check=True,
                         capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                                                  "TRANSFORMERS_OFFLINE": "1"})
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=["llm", "embed"])
    parser.add_argument("--threads", default="default")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.threads)))
        return
    print(f"cpus: {os.cpu_count()}, load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for kind in ("llm", "embed"):
        for competing in (False, True):
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if competing else None
            try:
                for threads in SETTINGS:
                    result = cell(kind, threads)
                    rows.append((kind, competing, threads, result))
                    print(kind, "competing" if competing else "alone", threads, result, flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    print(f"load average at end: {os.getloadavg()[0]:.1f}\n")
    print("| workload | threads | alone | beside 1 busy process | slowdown |\n|---|---|---|---|---|")
    for kind in ("llm", "embed"):
        for threads in SETTINGS:
            alone = next(r for k, c, t, r in rows if (k, c, t) == (kind, False, threads))
            busy = next(r for k, c, t, r in rows if (k, c, t) == (kind, True, threads))
            key, unit = ("seconds", "s") if kind == "llm" else ("ms_per_call", "ms")
            label = f"{threads} ({int(alone['threads'])})" if threads == "default" else threads
            what = (f"pion-llm: {int(alone['prompt_tokens'])} + {int(alone['generated'])} tokens" if kind == "llm"
                    else "embedder: 1 short text")
            print(f"| {what} | {label} | {alone[key]:.2f} {unit} | {busy[key]:.2f} {unit} | "
                  f"{busy[key] / alone[key]:.1f}x |")


if __name__ == "__main__":
    main()
