"""Multi-turn chat TTFT on pion-llm: prefix reuse through pion-server vs in-process vs none.

The shape of LMCache's multi-round QA benchmark: U users x T turns. Every conversation starts
with the same ~1K-token system prompt; each user's first message carries that user's own ~300-token
context; every later turn appends the model's previous answer and a short new question. Three
pion-llm configurations run the identical workload side by side: all three are started, then each
request is sent to (a), (b) and (c) back to back (never concurrently), so the three see the same
machine load — this 2-core machine is shared and its load moves a lot:

  (a) pion      pion-llm + pion-server: segments stored in and restored from pion-server
  (b) no-pion   pion-llm --no-pion: segments kept as tensors in the pion-llm process
  (c) no-reuse  pion-llm --no-prefix-cache: every request prefills its whole prompt
  (a8) pion-int8  (opt-in, --modes) like (a) with --vquant int8: segments restored through the shared
                prefix transport as stored bytes and decoded in pion-llm (issue 11)

Requests are sent one at a time, round-robin over users within each turn (turn 1 of every user,
then turn 2 ...), so TTFT is service time, not queueing. "total time" is the sum of one mode's
request latencies (first byte sent to last chunk received). TTFT is measured by the client with the
official openai SDK in streaming mode: request sent -> first non-empty content delta.

    .venv/bin/python benchmarks/bench_multiturn.py [--users 10] [--turns 6] [--max-tokens 16]
        [--threads 1] [--plot docs/img/bench_multiturn.png] [--json benchmarks/data/bench_multiturn.json]

Prints a markdown table (mean and p90 TTFT per turn, total time) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.llm_procs import MODEL, start_llm
from support.procs import start_server

MODES = {
    "pion": "(a) pion-server",
    "pion-int8": "(a8) pion-server, int8 segments",
    "no-pion": "(b) --no-pion (in-process)",
    "no-reuse": "(c) prefix reuse off",
    "stage2": "(d) pion-server --stage2 (attention in pion-server)",
}

_POLICY_TOPICS = ["refunds", "shipping", "passwords", "invoices", "data privacy", "warranty", "returns",
                  "account deletion", "two-factor login", "gift cards", "price matching", "order tracking",
                  "loyalty points", "business accounts", "accessibility", "outages", "student discounts",
                  "address changes", "cancellations", "API keys"]
_USER_FACTS = ["lives in {city}", "has been a customer since {year}", "owns {n} devices", "prefers {lang} replies",
               "uses the {plan} plan", "last ordered a {item}", "has {n} open tickets", "works as a {job}"]
_CITIES = ["Lyon", "Osaka", "Denver", "Porto", "Nairobi", "Oslo", "Austin", "Pune", "Lima", "Gdansk"]
_ITEMS = ["laptop stand", "mechanical keyboard", "webcam", "monitor arm", "USB hub", "desk lamp"]
_JOBS = ["nurse", "teacher", "architect", "baker", "pilot", "chemist", "lawyer", "farmer"]
_QUESTIONS = ["How do I reset my password?", "Can I get a refund for my last order?", "Where is my package?",
              "How do I add two-factor login?", "Can I change my shipping address?", "How do loyalty points work?",
              "Is my data shared with anyone?", "How do I cancel my plan?"]


def system_prompt() -> str:
    """A ~1K-token support handbook, identical for every user."""
    lines = ["You are the customer support assistant of Northwind Devices. Follow the handbook below. "
             "Answer in at most two sentences and never invent policies."]
    for i, topic in enumerate(_POLICY_TOPICS[:18]):
        lines.append(f"Policy {i + 1} ({topic}): customers asking about {topic} must first be identified by "
                     f"their account email. Explain the {topic} rules plainly, link the help page for {topic}, "
                     f"and offer to open a ticket if the question about {topic} is not resolved in the chat.")
    return "\n".join(lines)


def user_context(user: int) -> str:
    """A ~300-token profile and history that only this user's conversation contains."""
    facts = []
    for j in range(6):
        for k, fact in enumerate(_USER_FACTS):
            facts.append(fact.format(city=_CITIES[(user + j + k) % len(_CITIES)], year=2010 + (user * 3 + j) % 14,
                                     n=(user + j * k) % 7 + 1, lang=["English", "French", "German"][(user + j) % 3],
                                     plan=["basic", "plus", "pro"][(user + k) % 3], item=_ITEMS[(user + j) % len(_ITEMS)],
                                     job=_JOBS[(user + k) % len(_JOBS)]))
    return f"My customer number is {1000 + user}. About me: " + "; ".join(facts[:48]) + "."


@dataclass
class Sample:
    user: int
    turn: int
    ttft_s: float
    total_s: float
    prompt_tokens: int
    cached_tokens: int


@dataclass
class ModeResult:
    mode: str
    samples: list[Sample] = field(default_factory=list)
    busy_s: float = 0.0

    def turn_stats(self, turn: int) -> tuple[float, float]:
        values = sorted(s.ttft_s for s in self.samples if s.turn == turn)
        return statistics.fmean(values), percentile(values, 90)


def percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return float("nan")
    rank = (len(sorted_values) - 1) * pct / 100.0
    lo, hi = int(rank), min(int(rank) + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


class Conversations:
    """One mode's client and per-user histories; ``ask`` runs one turn of one user and records it."""

    def __init__(self, base_url: str, users: int, max_tokens: int, mode: str) -> None:
        from openai import OpenAI

        self.client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=600)
        self.histories = [[{"role": "system", "content": system_prompt()}] for _ in range(users)]
        self.max_tokens = max_tokens
        self.result = ModeResult(mode)

    def ask(self, user: int, turn: int) -> None:
        question = _QUESTIONS[(user + turn) % len(_QUESTIONS)]
        content = f"{user_context(user)}\n\n{question}" if turn == 1 else question
        history = self.histories[user]
        history.append({"role": "user", "content": content})
        t0 = time.perf_counter()
        ttft = None
        pieces: list[str] = []
        usage: Any = None
        stream = self.client.chat.completions.create(model=MODEL, messages=history, max_tokens=self.max_tokens,
                                                     temperature=0, stream=True,
                                                     stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                pieces.append(chunk.choices[0].delta.content)
        total = time.perf_counter() - t0
        history.append({"role": "assistant", "content": "".join(pieces)})
        self.result.samples.append(Sample(user, turn, ttft if ttft is not None else total, total,
                                          usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens))
        self.result.busy_s += total


def start_mode(mode: str, threads: int, work: Path, stack: ExitStack) -> str:
    """Start pion-llm (and for mode "pion" its pion-server) for one mode; returns the base URL."""
    llm_args = ["--threads", str(threads)]
    if mode in ("pion", "pion-int8", "stage2"):
        server = start_server(work / f"{mode}-data")
        stack.callback(server.stop)
        llm_args += ["--pion-port", str(server.port)]
        if mode == "pion-int8":
            llm_args += ["--vquant", "int8"]
        if mode == "stage2":
            llm_args += ["--stage2"]
    elif mode == "no-pion":
        llm_args += ["--no-pion"]
    else:
        llm_args += ["--no-prefix-cache"]
    print(f"starting pion-llm {MODES[mode]}", file=sys.stderr, flush=True)
    llm = start_llm(work / mode, *llm_args)
    stack.callback(llm.stop)
    return llm.url


def run_interleaved(urls: dict[str, str], users: int, turns: int, max_tokens: int) -> dict[str, ModeResult]:
    """Turn by turn, user by user, the same request to every mode back to back (same machine load)."""
    convs = {mode: Conversations(url, users, max_tokens, mode) for mode, url in urls.items()}
    for turn in range(1, turns + 1):
        for user in range(users):
            for conv in convs.values():
                conv.ask(user, turn)
        means = ", ".join(f"{m} {c.result.turn_stats(turn)[0] * 1000:.0f} ms" for m, c in convs.items())
        print(f"  turn {turn}: mean TTFT {means}", file=sys.stderr, flush=True)
    return {mode: conv.result for mode, conv in convs.items()}


def table(results: dict[str, ModeResult], turns: int) -> str:
    modes = list(results)
    int8 = "pion-int8" in modes and "no-pion" in modes
    head = ("| turn | " + " | ".join(f"{MODES[m]} mean / p90 TTFT" for m in modes)
            + " | (c) ÷ (a) mean | (a) ÷ (b) mean |" + (" (a8) ÷ (b) mean |" if int8 else ""))
    rows = [head, "|" + "---|" * (len(modes) + 3 + int8)]
    for turn in range(1, turns + 1):
        stats = {m: results[m].turn_stats(turn) for m in modes}
        cells = [f"{stats[m][0] * 1000:.0f} / {stats[m][1] * 1000:.0f} ms" for m in modes]
        c_over_a = stats["no-reuse"][0] / stats["pion"][0] if {"pion", "no-reuse"} <= set(modes) else float("nan")
        a_over_b = stats["pion"][0] / stats["no-pion"][0] if {"pion", "no-pion"} <= set(modes) else float("nan")
        a8 = f" {stats['pion-int8'][0] / stats['no-pion'][0]:.2f}× |" if int8 else ""
        rows.append(f"| {turn} | " + " | ".join(cells) + f" | {c_over_a:.1f}× | {a_over_b:.2f}× |" + a8)
    totals = [f"{results[m].busy_s:.1f} s" for m in modes]
    rows.append("| total time | " + " | ".join(totals) + " | | |" + (" |" if int8 else ""))
    cached = [f"{sum(s.cached_tokens for s in results[m].samples) / max(1, sum(s.prompt_tokens for s in results[m].samples)):.0%}"
              for m in modes]
    rows.append("| prompt tokens from cache | " + " | ".join(cached) + " | | |" + (" |" if int8 else ""))
    return "\n".join(rows)


def plot(results: dict[str, ModeResult], turns: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = list(range(1, turns + 1))
    for mode, res in results.items():
        means = [res.turn_stats(t)[0] * 1000 for t in xs]
        p90s = [res.turn_stats(t)[1] * 1000 for t in xs]
        line, = ax.plot(xs, means, marker="o", label=f"{MODES[mode]} mean")
        ax.plot(xs, p90s, linestyle="--", color=line.get_color(), alpha=0.6, label=f"{MODES[mode]} p90")
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xlabel("turn")
    ax.set_ylabel("TTFT (ms, log scale)")
    users = len({s.user for s in next(iter(results.values())).samples})
    ax.set_title(f"pion-llm multi-turn chat: {users} users x {turns} turns, ~1K-token shared system prompt")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=10)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="torch threads in pion-llm (1 on a shared 2-core box)")
    p.add_argument("--modes", default="pion,no-pion,no-reuse")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "bench_multiturn.png")
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "data" / "bench_multiturn.json")
    args = p.parse_args()

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt  # so SIGTERM also stops the child processes (ExitStack)

    signal.signal(signal.SIGTERM, interrupt)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        p.error(f"unknown mode(s) {sorted(unknown)}; choose from {list(MODES)}")
    with tempfile.TemporaryDirectory(prefix="pion-bench-mt-") as tmp, ExitStack() as stack:
        urls = {mode: start_mode(mode, args.threads, Path(tmp), stack) for mode in modes}
        results = run_interleaved(urls, args.users, args.turns, args.max_tokens)
    print(f"\n{args.users} users x {args.turns} turns, max_tokens {args.max_tokens}, torch threads {args.threads}\n")
    print(table(results, args.turns))
    plot(results, args.turns, args.plot)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({m: {"busy_s": r.busy_s, "samples": [s.__dict__ for s in r.samples]}
                                     for m, r in results.items()}, indent=1))
    print(f"\nplot: {args.plot}\nraw: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
