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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ttft_workload  # (the benchmarks' one server starter, imported after the path)


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
    """A server whose binary lane (port + 1) is free too."""
    return ttft_workload.start_server(data_dir, env=env, port=_free_port_pair())


def p50_ms(fn: Callable[[], object], runs: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def interleaved_p50_ms(fns: list[Callable[[], object]], runs: int) -> list[float]:
    """p50 of each function, run in turn round by round, so a busy machine slows all of them alike."""
    samples: list[list[float]] = [[] for _ in fns]
    for i in range(runs + 5):
        for fn, out in zip(fns, samples, strict=True):
            t0 = time.perf_counter()
            fn()
            if i >= 5:
                out.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(out) for out in samples]


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
    fields = [str(w).encode() if not isinstance(w, bytes) else w for w in words]
    inproc, resp, binary = interleaved_p50_ms([lambda: prefix_ops.dense(kt, vt, qt),
                                               lambda: r.execute_command("ATTEND.PREFIX.QUERY", *words),
                                               lambda: lane.call(CMD_ATTEND_PREFIX_QUERY, fields)], runs)

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


# ---- SmolLM2 helpers ------------------------------------------------------------------------

FILLER = ("Section {i}. The service keeps detailed logs of every request, retries failed jobs with "
          "exponential backoff, and reports weekly usage so that teams can plan their capacity. ")
QUESTION = "<|im_start|>user\nWhat does the service do with failed jobs?<|im_end|>\n<|im_start|>assistant\n"


def haystack_ids(tok: Any, n: int) -> list[int]:
    text = "".join(FILLER.format(i=i) for i in range(n // 20 + 50))
    ids = list(tok.encode(text, add_special_tokens=False))
    return ids[:n]


def first_token(model: Any, ids: list[int], cache: Any | None) -> int:
    from pion.client.runtimes.transformers_runtime import forward_logits

    return int(torch.argmax(forward_logits(model, ids, cache)[0]))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1e3, out


class Readers:
    """The warm-path clients: Stage 1, Stage 2 over RESP, Stage 2 over the binary lane (no in-process lane)."""

    def __init__(self, model: Any, port: int) -> None:
        from pion import PionPromptCache

        os.environ["PION_PROMPT_CACHE_NO_INPROC"] = "1"
        self.stage1 = PionPromptCache(model, vquant="fp16", port=port)
        self.resp = PionPromptCache(model, vquant="fp16", port=port, stage2=True, stage2_lane="resp")
        self.binary = PionPromptCache(model, vquant="fp16", port=port, stage2=True, stage2_lane="binary")
        del os.environ["PION_PROMPT_CACHE_NO_INPROC"]

    def close(self) -> None:
        for pc in (self.stage1, self.resp, self.binary):
            pc.close()


def bench_ttft(model: Any, tok: Any, port: int, lengths: list[int], warm_runs: int) -> None:
    from pion import PionPromptCache
    from pion.client.runtimes.transformers_runtime import forward_logits, trim_cache

    suffix = list(tok.encode(QUESTION, add_special_tokens=False))
    readers = Readers(model, port)
    writer = PionPromptCache(model, vquant="fp16", port=port, stage2=True)
    rows = []
    for n in lengths:
        prefix = haystack_ids(tok, n)
        ns = f"bench-ttft-{n}-{time.time_ns()}"
        model.set_attn_implementation("sdpa")
        cold_ms, (logits, bound_cache) = timed(lambda: forward_logits(model, prefix + suffix, None))
        want = int(torch.argmax(logits))
        trim_cache(bound_cache, n)
        writer.get_or_prefill(prefix, namespace=ns)  # miss: prefill, V-store + ATTEND push, in-process copy
        cols: dict[str, list[float]] = {k: [] for k in ("B", "C", "C'", "D", "bound")}
        agree: dict[str, bool] = {k: True for k in cols}
        for _ in range(warm_runs):
            for key, pc in (("B", readers.stage1), ("C", readers.resp), ("C'", readers.binary), ("D", writer)):
                def run(pc: Any = pc) -> int:
                    cache = pc.get_or_prefill(prefix, namespace=ns) if pc is not writer else \
                        writer.stage2.make_cache(ns, n)
                    return first_token(model, suffix, cache)
                ms, token = timed(run)
                cols[key].append(ms)
                agree[key] &= token == want
            model.set_attn_implementation("sdpa")
            ms, token = timed(lambda: first_token(model, suffix, bound_cache))
            trim_cache(bound_cache, n)
            cols["bound"].append(ms)
            agree["bound"] &= token == want
        med = {k: statistics.median(v) for k, v in cols.items()}
        rows.append((n, cold_ms, med, all(agree.values())))
        print(f"  {n}: cold {cold_ms:.0f} ms, " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()), flush=True)
    readers.close()
    writer.close()
    print(f"\n### Stage 2 TTFT on SmolLM2-135M (ms, median of {warm_runs} warm runs; cold once)\n")
    print("| prefix | A cold | B Stage 1 | C Stage 2 RESP | C' binary | D in-process | bound (local cache) "
          "| A/C | B/C | C'/bound | same first token |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, cold, m, ok in rows:
        m = {("Cb" if k == "C'" else k): v for k, v in m.items()}
        print(f"| {n} | {cold:.0f} | {m['B']:.1f} | {m['C']:.1f} | {m['Cb']:.1f} | {m['D']:.1f} | {m['bound']:.1f} "
              f"| {cold / m['C']:.1f}x | {m['B'] / m['C']:.2f}x | {m['Cb'] / m['bound']:.2f}x | {'yes' if ok else 'NO'} |")


def bench_decode(model: Any, tok: Any, port: int, n_prefix: int, n_tokens: int) -> None:
    from pion import PionPromptCache
    from pion.client.runtimes.transformers_runtime import generate_steps, prefill

    prefix = haystack_ids(tok, n_prefix)
    suffix = list(tok.encode(QUESTION, add_special_tokens=False))
    ns = f"bench-decode-{time.time_ns()}"
    readers = Readers(model, port)
    writer = PionPromptCache(model, vquant="fp16", port=port, stage2=True)
    writer.get_or_prefill(prefix, namespace=ns)
    model.set_attn_implementation("sdpa")
    local = prefill(model, prefix)

    def tok_per_s(cache: Any) -> tuple[float, list[int]]:
        steps = list(generate_steps(model, _NoEos(tok), suffix, prompt_cache=cache, max_tokens=n_tokens))
        return (len(steps) - 1) / (steps[-1].elapsed_s - steps[0].elapsed_s), [s.token for s in steps]

    results = {"local DynamicCache (sdpa)": tok_per_s(local)}
    results["Stage 2 in-process"] = tok_per_s(writer.stage2.make_cache(ns, n_prefix))
    results["Stage 2 binary lane"] = tok_per_s(readers.binary.get_or_prefill(prefix, namespace=ns))
    results["Stage 2 RESP"] = tok_per_s(readers.resp.get_or_prefill(prefix, namespace=ns))
    readers.close()
    writer.close()
    base, base_ids = results["local DynamicCache (sdpa)"]
    print(f"\n### Decode after a {n_prefix}-token prefix, {n_tokens} greedy tokens (SmolLM2-135M)\n")
    print("| cache | tokens/s | vs local | same tokens |\n|---|---|---|---|")
    for name, (rate, ids) in results.items():
        print(f"| {name} | {rate:.1f} | {rate / base:.2f}x | {'yes' if ids == base_ids else 'NO'} |")


NEEDLE = "Important: the secret pass code is {code}. Remember it. "
NIAH_QUESTION = " Now recall it. Important: the secret pass code is"


def bench_niah(model: Any, tok: Any, port: int, n_tokens: int, n_probes: int, block: int, k_top: int) -> None:
    """Needle at varied depths: dense Stage 2 (in-process lane == the uncached model) vs
    QUERY_SPARSE_AUTO_FUSED over RESP on every layer; the answer is the first 8 greedy tokens."""
    from pion import PionPromptCache
    from pion.client.runtimes.transformers_runtime import generate_ids

    rng = np.random.default_rng(7)
    suffix = list(tok.encode(NIAH_QUESTION, add_special_tokens=False))
    hay = haystack_ids(tok, n_tokens)
    writer = PionPromptCache(model, vquant="fp16", port=port, stage2=True)
    os.environ["PION_PROMPT_CACHE_NO_INPROC"] = "1"
    sparse = PionPromptCache(model, vquant="fp16", port=port, stage2=True, stage2_lane="resp")
    del os.environ["PION_PROMPT_CACHE_NO_INPROC"]
    sparse.stage2.sparse_auto = (block, k_top)
    rows = []
    for i in range(n_probes):
        depth = (i + 0.5) / n_probes
        code = str(int(rng.integers(1000, 9999)))
        needle = list(tok.encode(NEEDLE.format(code=code), add_special_tokens=False))
        at = int(depth * (n_tokens - len(needle)))
        prefix = hay[:at] + needle + hay[at:n_tokens - len(needle)]
        ns = f"bench-niah-{i}-{time.time_ns()}"
        writer.get_or_prefill(prefix, namespace=ns)
        dense_ids = generate_ids(model, _NoEos(tok), suffix, writer.stage2.make_cache(ns, len(prefix)), max_tokens=8)
        sparse_ids = generate_ids(model, _NoEos(tok), suffix, sparse.get_or_prefill(prefix, namespace=ns),
                                  max_tokens=8)
        dense_text, sparse_text = tok.decode(dense_ids), tok.decode(sparse_ids)
        rows.append((depth, code, code in dense_text, code in sparse_text, dense_ids == sparse_ids))
        print(f"  probe {i}: depth {depth:.2f} code {code}: dense {dense_text!r} sparse {sparse_text!r}", flush=True)
        writer.client.redis.execute_command("KV.PREFIX.DROP", ns)  # keep memory flat
    writer.close()
    sparse.close()
    dense_right = [r for r in rows if r[2]]
    same = sum(1 for r in dense_right if r[4])
    print(f"\n### Needle in a haystack, {n_tokens} tokens, {n_probes} probes (SmolLM2-135M; sparse B={block}, "
          f"K_top={k_top})\n")
    print("| | probes |\n|---|---|")
    print(f"| dense Stage 2 finds the code | {len(dense_right)} / {n_probes} |")
    print(f"| sparse finds the code | {sum(1 for r in rows if r[3])} / {n_probes} |")
    print(f"| sparse gives the same 8 tokens as dense, where dense is right | {same} / {len(dense_right)} |")
    print(f"| sparse gives the same 8 tokens as dense, all probes | {sum(1 for r in rows if r[4])} / {n_probes} |")


class _NoEos:
    """The tokenizer with EOS hidden, so every run generates exactly ``n_tokens``."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.eos_token_id = None

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=skip_special_tokens))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="*", default=["query"], choices=["query", "ttft", "decode", "niah"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads in this process")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--lengths", type=int, nargs="*", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--decode-prefix", type=int, default=2048)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--niah-tokens", type=int, default=4096)
    parser.add_argument("--niah-probes", type=int, default=30)
    parser.add_argument("--niah-block", type=int, default=64)
    parser.add_argument("--niah-k-top", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()
    proc, port = start_server(tmp.name)
    try:
        if "query" in args.parts:
            bench_query(port, args.runs)
        model: Any = None
        if {"ttft", "decode", "niah"} & set(args.parts):
            from pion import load_model

            model, tok = load_model(device="cpu")
            model.generation_config.eos_token_id = None
        if "ttft" in args.parts:
            bench_ttft(model, tok, port, args.lengths, args.warm_runs)
        if "decode" in args.parts:
            bench_decode(model, tok, port, args.decode_prefix, args.decode_tokens)
        if "niah" in args.parts:
            bench_niah(model, tok, port, args.niah_tokens, args.niah_probes, args.niah_block, args.niah_k_top)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        tmp.cleanup()


if __name__ == "__main__":
    main()
