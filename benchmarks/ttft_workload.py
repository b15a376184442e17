"""Time to first token with and without pion-server's prefix cache (the Stage-1 harness of docs/design.md).

Two parts, one run, the real SmolLM2-135M on CPU (HF transformers):

1. Workload: 5 system prompts x 30 queries. Each prompt's 30 queries cycle through 10 distinct
   user questions (3 repeats each), so 5 of 150 requests miss and 145 hit (96.7 %).
   * cold TTFT: prefill system + question, first token; measured once per distinct (prompt,
     question) pair (50 requests; a repeat costs the same) and weighted x3.
   * warm TTFT: every one of the 150 requests through ``PionPromptCache`` (fp16): LOOKUP, then
     fetch + suffix forward on a hit, or local prefill + register + store on a miss.
   * throughput x: sequential requests per second to the first token, warm vs cold.
   * first-token agreement: warm first token == cold first token, over the 150 requests.
2. Prefix-length sweep (256, 512, 1K, 2K, 4K tokens), three columns in one run:
   cold (no cache), warm through pion-server (fp16), and the in-process upper bound (the same
   DynamicCache kept in memory, no server). Warm is broken into stages: lookup, fetch, decode,
   cache build, suffix forward.

Prints markdown tables and writes a PNG plot. Usage:

    .venv/bin/python benchmarks/ttft_workload.py [--port P] [--threads 1] [--plot docs/img/ttft_workload.png]

Without ``--port`` it starts its own pion-server on a free loopback port and stops it at the end.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import torch

from pion import PionPromptCache, load_model
from pion.client.runtimes.transformers_runtime import encode_prompt, forward_logits, prefill, trim_cache

os.environ.setdefault("HF_HUB_OFFLINE", "1")

POLICY = (
    "Company policy: be accurate, concise and friendly. Never invent account details, prices or dates. "
    "If you are not sure, say so and offer to connect the user with a human agent. Keep personal data "
    "private: do not repeat passwords, card numbers or addresses back to the user. Prefer numbered steps "
    "for procedures, and end with a short offer of further help. Business hours are 8am to 8pm, Monday "
    "to Saturday. Refunds are possible within 30 days with a receipt. Shipping takes 3 to 5 working days "
    "inside the country and 7 to 14 days abroad. Premium members get free shipping and priority support. "
    "Accounts: a user can reset a password from the login page with the 'Forgot password' link; the link "
    "expires after one hour. Two-factor authentication can be enabled in the security settings and is "
    "strongly recommended. Addresses and payment methods can be changed in the profile until an order "
    "ships. Escalation: complaints about safety, billing errors over 100 dollars or legal questions must "
    "go to a human agent at once. Tone: use plain words, short sentences, and no jargon unless the user "
    "uses it first. Do not make promises about future features. Do not discuss competitors. When the "
    "user writes in another language, answer in that language if you can. Always thank the user. "
)
ROLES = [
    "You are the support agent of Acme Cloud, a hosting company offering servers, storage and domains.",
    "You are the travel desk assistant of Globetrek, which books flights, hotels and city tours.",
    "You are the kitchen helper of FreshBox, a meal-kit company delivering recipes with fresh ingredients.",
    "You are the tutor bot of CodeCamp, which teaches Python programming to complete beginners.",
    "You are the coach of FitNow, an app with home workouts, stretching plans and nutrition tips.",
]
QUESTIONS = [
    "How do I reset my password?", "Can I change my delivery address?", "What are your opening hours?",
    "How do I get a refund?", "Do you ship abroad?", "What does premium membership include?",
    "Can I talk to a human?", "How long does shipping take?", "Is my data kept private?",
    "What should I do first today?",
]
SWEEP_TOKENS = [256, 512, 1024, 2048, 4096]
FILLER = ("Section {i}. The service keeps detailed logs of every request, retries failed jobs with "
          "exponential backoff, and reports weekly usage so that teams can plan their capacity. ")


def chat_system(text: str) -> str:
    return f"<|im_start|>system\n{text}<|im_end|>\n"


def chat_user(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def first_token(model: Any, ids: list[int], cache: Any | None) -> int:
    return int(torch.argmax(forward_logits(model, ids, cache)[0]))


# ---- server lifetime -------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(data_dir: str, *args: str, env: dict[str, str] | None = None,
                 port: int | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``pion-server`` on ``port`` (a free one by default) with ``args``; wait for PING.

    The benchmarks' one way to start a bare server process they own (``tests/support/procs``
    is the tests' richer one)."""
    port = _free_port() if port is None else port
    proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", str(port), "--dir", data_dir, *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=None if env is None else {**os.environ, **env})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return proc, port
        except redis.RedisError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("pion-server did not start")


# ---- part 1: the workload ------------------------------------------------------------------

@dataclass
class WorkloadResult:
    cold_ms: list[float] = field(default_factory=list)   # per request (150, cold repeated per distinct pair)
    warm_ms: list[float] = field(default_factory=list)   # per request (150)
    agree: int = 0
    hits: int = 0
    prefix_tokens: list[int] = field(default_factory=list)


def run_workload(model: Any, tok: Any, port: int, queries: int, distinct: int) -> WorkloadResult:
    result = WorkloadResult()
    with PionPromptCache(model, vquant="fp16", port=port, tokenizer=tok) as pc:
        for p, role in enumerate(ROLES):
            prefix = encode_prompt(tok, chat_system(f"{role} {POLICY}"))
            result.prefix_tokens.append(len(prefix))
            ns = pc.namespace_for(prefix, f"ttft-workload-{time.time_ns()}")  # fresh: first query misses
            cold: dict[int, tuple[float, int]] = {}
            for q in range(queries):
                question = QUESTIONS[q % distinct]
                suffix = encode_prompt(tok, chat_user(question))
                if q % distinct not in cold:
                    t0 = time.perf_counter()
                    token = first_token(model, prefix + suffix, None)
                    cold[q % distinct] = ((time.perf_counter() - t0) * 1e3, token)
                t0 = time.perf_counter()
                cache = pc.get_or_prefill(prefix, namespace=ns)
                token = first_token(model, suffix, cache)
                result.warm_ms.append((time.perf_counter() - t0) * 1e3)
                result.cold_ms.append(cold[q % distinct][0])
                result.agree += int(token == cold[q % distinct][1])
            print(f"  prompt {p}: {len(prefix)} prefix tokens, cold {statistics.mean(v[0] for v in cold.values()):.0f} ms,"
                  f" warm {statistics.mean(result.warm_ms[-queries:]):.0f} ms", flush=True)
        result.hits = pc.stats()["hits"]
    return result


# ---- part 2: the prefix-length sweep --------------------------------------------------------

@dataclass
class SweepRow:
    n_tokens: int
    cold_ms: float
    warm_ms: float
    inproc_ms: float
    stages: dict[str, float]
    first_token_agree: bool


def _median_stages(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def run_sweep(model: Any, tok: Any, port: int, lengths: list[int], warm_runs: int) -> list[SweepRow]:
    text = "".join(FILLER.format(i=i) for i in range(400))
    base = encode_prompt(tok, text)
    suffix = encode_prompt(tok, chat_user(QUESTIONS[0]))
    rows = []
    with PionPromptCache(model, vquant="fp16", port=port, tokenizer=tok) as pc:
        for n in lengths:
            prefix = base[:n]
            cold_runs = 2 if n <= 1024 else 1
            cold_ms, cache = [], None
            for _ in range(cold_runs):
                t0 = time.perf_counter()
                logits, cache = forward_logits(model, prefix + suffix, None)
                cold_ms.append((time.perf_counter() - t0) * 1e3)
            cold_token = int(torch.argmax(logits))
            trim_cache(cache, n)  # the prefix part: in-process upper bound, and what we store
            ns = pc.namespace_for(prefix, f"ttft-sweep-{time.time_ns()}")
            if not pc.store(prefix, cache, namespace=ns, prefill_ms=statistics.median(cold_ms)):
                raise RuntimeError("storing the sweep prefix failed")
            warm_ms, inproc_ms, stages, tokens = [], [], [], []
            for _ in range(warm_runs):
                t0 = time.perf_counter()
                warm = pc.get_or_prefill(prefix, namespace=ns)
                t1 = time.perf_counter()
                tokens.append(first_token(model, suffix, warm))
                t2 = time.perf_counter()
                warm_ms.append((t2 - t0) * 1e3)
                stages.append({**pc.stats()["last_restore_ms"], "suffix forward": (t2 - t1) * 1e3})
                del warm
                t0 = time.perf_counter()
                first_token(model, suffix, cache)
                inproc_ms.append((time.perf_counter() - t0) * 1e3)
                trim_cache(cache, n)
            row = SweepRow(n, statistics.median(cold_ms), statistics.median(warm_ms), statistics.median(inproc_ms),
                           _median_stages(stages), all(t == cold_token for t in tokens))
            rows.append(row)
            print(f"  {n} tokens: cold {row.cold_ms:.0f} ms, warm {row.warm_ms:.0f} ms, in-process {row.inproc_ms:.0f} ms",
                  flush=True)
            del cache
    return rows


# ---- output ---------------------------------------------------------------------------------

def print_tables(work: WorkloadResult, sweep: list[SweepRow]) -> None:
    n = len(work.warm_ms)
    cold, warm = statistics.mean(work.cold_ms), statistics.mean(work.warm_ms)
    print("\n### Workload (5 prompts x 30 queries, fp16)\n")
    print(f"Prefix tokens per system prompt: {min(work.prefix_tokens)}-{max(work.prefix_tokens)}; "
          f"hits {work.hits}/{n} ({work.hits / n:.1%}).\n")
    print("| Model | Cold TTFT | Warm TTFT | Reduction | Throughput | First-token |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| SmolLM2-135M-Instruct (fp32 weights, CPU) | {cold:.0f} ms | {warm:.0f} ms | "
          f"{1 - warm / cold:.1%} ({cold / warm:.2f}x) | {sum(work.cold_ms) / sum(work.warm_ms):.2f}x | "
          f"{work.agree / n:.0%} ({work.agree}/{n}) |")
    print("\n### Prefix-length sweep (fp16 through pion-server; medians)\n")
    print("| Prefix tokens | Cold | Warm (pion-server) | In-process bound | Warm vs cold | Warm / in-process "
          "| lookup | fetch | decode | build | suffix forward | First token |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in sweep:
        s = r.stages
        print(f"| {r.n_tokens} | {r.cold_ms:.0f} ms | {r.warm_ms:.0f} ms | {r.inproc_ms:.0f} ms | "
              f"{r.cold_ms / r.warm_ms:.1f}x | {r.warm_ms / r.inproc_ms:.2f}x | {s['lookup']:.1f} | {s['fetch']:.0f} | "
              f"{s['decode']:.1f} | {s['build']:.1f} | {s['suffix forward']:.0f} | "
              f"{'same' if r.first_token_agree else 'DIFFERENT'} |")


def plot(work: WorkloadResult, sweep: list[SweepRow], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [r.n_tokens for r in sweep]
    left.plot(xs, [r.cold_ms for r in sweep], "o-", label="cold (no cache)")
    left.plot(xs, [r.warm_ms for r in sweep], "s-", label="warm via pion-server (fp16)")
    left.plot(xs, [r.inproc_ms for r in sweep], "^--", label="in-process upper bound")
    left.set(xscale="log", yscale="log", xlabel="prefix tokens", ylabel="TTFT (ms)",
             title="SmolLM2-135M, CPU: TTFT vs prefix length")
    left.set_xticks(xs, [str(x) for x in xs])
    left.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    left.grid(True, which="both", alpha=0.3)
    left.legend()
    cold, warm = statistics.mean(work.cold_ms), statistics.mean(work.warm_ms)
    right.bar(["cold", "warm"], [cold, warm], color=["tab:blue", "tab:orange"])
    right.set(ylabel="mean TTFT (ms)", title=f"5 prompts x 30 queries ({work.hits}/{len(work.warm_ms)} hits)")
    for i, v in enumerate([cold, warm]):
        right.text(i, v, f"{v:.0f} ms", ha="center", va="bottom")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"\nplot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, help="use a running pion-server instead of starting one")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1 is fastest on a shared 2-core box)")
    parser.add_argument("--queries", type=int, default=30, help="queries per system prompt")
    parser.add_argument("--distinct", type=int, default=10, help="distinct questions per prompt")
    parser.add_argument("--warm-runs", type=int, default=3, help="warm / in-process repeats per sweep length")
    parser.add_argument("--lengths", type=int, nargs="*", default=SWEEP_TOKENS)
    parser.add_argument("--plot", type=Path, default=Path("docs/img/ttft_workload.png"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(device="cpu")
    proc, tmp = None, None
    port = args.port
    if port is None:
        tmp = tempfile.TemporaryDirectory(prefix="pion-ttft-")
        proc, port = start_server(tmp.name)
    try:
        print(f"SmolLM2-135M on {torch.get_num_threads()} thread(s), pion-server on 127.0.0.1:{port}", flush=True)
        started = time.perf_counter()
        print("workload:", flush=True)
        work = run_workload(model, tok, port, args.queries, args.distinct)
        print("sweep:", flush=True)
        sweep = run_sweep(model, tok, port, args.lengths, args.warm_runs)
        print_tables(work, sweep)
        plot(work, sweep, args.plot)
        print(f"total benchmark time {time.perf_counter() - started:.0f} s")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
