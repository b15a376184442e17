"""TTFT of the MLX runtime next to the transformers runtime: cold, warm through pion-server, in-process.

One run, one pion-server, the same SmolLM2-135M weights (the converted safetensors both runtimes
read), fp16 storage, 1 torch thread. For each runtime:

1. Workload (the spec's shape, P system prompts x Q queries cycling through D distinct questions):
   cold TTFT measured once per distinct (prompt, question) pair and weighted; warm TTFT for every
   request through ``PionPromptCache`` (the first per prompt misses); first-token agreement.
2. Prefix-length sweep: one question after a synthetic prefix of N tokens; cold (no cache), warm
   (pion-server hit) and in-process (the prefix cache kept in memory, no server).

The spec's full shape is ``--prompts 5 --queries 30 --distinct 10`` with ~300-token prompts; MLX's
Linux CPU backend runs SmolLM2 ~50x slower than torch here, so the recorded run uses a reduced size
(docs/benchmarks.md gives the exact command).

    .venv/bin/python benchmarks/bench_mlx_ttft.py [--prompts 5 --queries 6 --distinct 2 --prefix-tokens 128]
        [--sweep 128,512] [--runtimes transformers,mlx]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from ttft_workload import FILLER, POLICY, QUESTIONS, ROLES, chat_system, chat_user, start_server  # noqa: E402


@dataclass
class Runtime:
    """What the benchmark needs from a runtime: encode, first token, a prompt cache, a kept copy."""

    name: str
    model: Any
    tok: Any
    encode: Callable[[str], list[int]]
    first_token: Callable[[list[int], Any], int]
    prompt_cache: Callable[[int], Any]          # port -> PionPromptCache
    kept: Callable[[list[int]], Callable[[], Any]]  # prefix -> a factory of fresh in-process caches


def transformers_runtime() -> Runtime:
    from pion import PionPromptCache, load_model
    from pion.client.runtimes.transformers_runtime import encode_prompt, forward_logits, prefill

    torch.set_num_threads(1)
    model, tok = load_model(device="cpu")

    def first(ids: list[int], cache: Any) -> int:
        return int(torch.argmax(forward_logits(model, ids, cache)[0]))

    def kept(prefix: list[int]) -> Callable[[], Any]:
        cache = prefill(model, prefix)
        return lambda: copy.deepcopy(cache)

    return Runtime("transformers", model, tok, lambda text: encode_prompt(tok, text), first,
                   lambda port: PionPromptCache(model, vquant="fp16", port=port, tokenizer=tok), kept)


def mlx_runtime() -> Runtime:
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from pion.client.runtimes import mlx_runtime as mr
    from pion.mlx import PionPromptCache

    model, tok = mr.load_model()

    def kept(prefix: list[int]) -> Callable[[], Any]:
        held = [(c.keys[:, :, :len(prefix)], c.values[:, :, :len(prefix)]) for c in mr.prefill(model, prefix)]
        mx.eval(held)

        def fresh() -> list[Any]:
            out = []
            for k, v in held:  # new KVCache objects over the kept arrays; a suffix appends by concatenation
                c = KVCache()
                c.keys, c.values, c.offset = k, v, k.shape[2]
                out.append(c)
            return out
        return fresh

    return Runtime("mlx", model, tok, lambda text: mr.encode_prompt(tok, text),
                   lambda ids, cache: mr.first_token(model, ids, cache),
                   lambda port: PionPromptCache(model, vquant="fp16", port=port, tokenizer=tok), kept)


def ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


@dataclass
class Workload:
    cold_ms: list[float] = field(default_factory=list)
    warm_ms: list[float] = field(default_factory=list)
    agree: int = 0
    hits: int = 0
    prefix_tokens: list[int] = field(default_factory=list)


def run_workload(rt: Runtime, port: int, prompts: int, queries: int, distinct: int, prefix_tokens: int) -> Workload:
    result = Workload()
    with rt.prompt_cache(port) as pc:
        for p in range(prompts):
            prefix = rt.encode(chat_system(f"{ROLES[p % len(ROLES)]} {POLICY}"))[:prefix_tokens]
            result.prefix_tokens.append(len(prefix))
            ns = pc.namespace_for(prefix, f"bench-mlx-ttft-{time.time_ns()}")  # fresh: the first query misses
            cold: dict[int, tuple[float, int]] = {}
            for q in range(queries):
                suffix = rt.encode(chat_user(QUESTIONS[q % distinct]))
                if q % distinct not in cold:
                    t0 = time.perf_counter()
                    token = rt.first_token(prefix + suffix, None)
                    cold[q % distinct] = (ms_since(t0), token)
                cold_ms, cold_token = cold[q % distinct]
                t0 = time.perf_counter()
                token = rt.first_token(suffix, pc.get_or_prefill(prefix, namespace=ns))
                result.warm_ms.append(ms_since(t0))
                result.cold_ms.append(cold_ms)
                result.agree += token == cold_token
        result.hits = pc.stats()["hits"]
    return result


@dataclass
class SweepRow:
    tokens: int
    cold_ms: float
    warm_ms: float
    inproc_ms: float
    same: bool


def run_sweep(rt: Runtime, port: int, sizes: list[int], repeats: int) -> list[SweepRow]:
    rows = []
    filler = "".join(FILLER.format(i=i) for i in range(400))
    suffix = rt.encode(chat_user(QUESTIONS[0]))
    with rt.prompt_cache(port) as pc:
        for n in sizes:
            prefix = rt.encode(chat_system(filler))[:n]
            t0 = time.perf_counter()
            cold_token = rt.first_token(prefix + suffix, None)
            cold_ms = ms_since(t0)
            ns = pc.namespace_for(prefix, f"bench-mlx-sweep-{time.time_ns()}")
            pc.get_or_prefill(prefix, namespace=ns)  # the miss that stores it
            warm, tokens = [], set()
            for _ in range(repeats):
                t0 = time.perf_counter()
                tokens.add(rt.first_token(suffix, pc.get_or_prefill(prefix, namespace=ns)))
                warm.append(ms_since(t0))
            fresh = rt.kept(prefix)
            inproc = []
            for _ in range(repeats):
                cache = fresh()
                t0 = time.perf_counter()
                tokens.add(rt.first_token(suffix, cache))
                inproc.append(ms_since(t0))
            rows.append(SweepRow(n, cold_ms, statistics.median(warm), statistics.median(inproc),
                                 tokens == {cold_token}))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=5)
    parser.add_argument("--queries", type=int, default=6)
    parser.add_argument("--distinct", type=int, default=2)
    parser.add_argument("--prefix-tokens", type=int, default=128)
    parser.add_argument("--sweep", default="128,512")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--runtimes", default="transformers,mlx")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sweep.split(",") if s]
    makers = {"transformers": transformers_runtime, "mlx": mlx_runtime}
    with tempfile.TemporaryDirectory() as data:
        proc, port = start_server(data)
        try:
            results = []
            for name in args.runtimes.split(","):
                rt = makers[name]()
                t0 = time.perf_counter()
                work = run_workload(rt, port, args.prompts, args.queries, args.distinct, args.prefix_tokens)
                sweep = run_sweep(rt, port, sizes, args.repeats)
                results.append((rt.name, work, sweep, time.perf_counter() - t0))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    n = args.prompts * args.queries
    print(f"\nWorkload: {args.prompts} prompts x {args.queries} queries ({args.distinct} distinct), "
          f"prefix {args.prefix_tokens} tokens, fp16 storage\n")
    print("| Runtime | Cold TTFT | Warm TTFT | Warm vs cold | Hits | First token same |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, work, _, _ in results:
        cold, warm = statistics.mean(work.cold_ms), statistics.mean(work.warm_ms)
        print(f"| {name} | {cold:.0f} ms | {warm:.0f} ms | {cold / warm:.2f}x | {work.hits}/{n} | {work.agree}/{n} |")
    print(f"\nPrefix sweep (warm and in-process: median of {args.repeats})\n")
    print("| Runtime | Prefix tokens | Cold | Warm (pion-server) | In-process | Warm vs cold | Warm / in-process "
          "| First token |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, _, sweep, _ in results:
        for r in sweep:
            print(f"| {name} | {r.tokens} | {r.cold_ms:.0f} ms | {r.warm_ms:.0f} ms | {r.inproc_ms:.0f} ms | "
                  f"{r.cold_ms / r.warm_ms:.1f}x | {r.warm_ms / r.inproc_ms:.2f}x | {'same' if r.same else 'DIFFERS'} |")
    if len(results) == 2:
        print("\nMLX / transformers, same row: " + ", ".join(
            f"{a.tokens} tok cold {b.cold_ms / a.cold_ms:.1f}x, warm {b.warm_ms / a.warm_ms:.1f}x"
            for a, b in zip(results[0][2], results[1][2], strict=True)))
    print("\nwall per runtime: " + ", ".join(f"{name} {secs:.0f} s" for name, _, _, secs in results))


if __name__ == "__main__":
    main()
