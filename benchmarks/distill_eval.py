"""--distill on vs off: what L1 / L3 direct / L3 composite / L3b catch, and how often they are wrong.

Replays (written by ``make_distill_replays.py`` before any tuning, dev/test split by intent):
``benchmarks/data/distill_faq.jsonl`` (paraphrase families, traps, two-part questions) and
``benchmarks/data/distill_diverse.jsonl`` (every question its own subject).

For each replay, split and mode (off / on) a fresh pion-server, the OpenAI-compatible test
server from ``tests/support`` (its answers name the question they answer: "Answer 3 from
openai to: <question>") and pion-serve are started, and the split is replayed in file order
with ``pion serve-tools replay``'s code. A served answer is **right** when the families of the
questions it answers equal the query's family (a two-part query needs both), else **wrong**.

    PYTHONPATH=src python benchmarks/distill_eval.py --split test      # the reported figures
    PYTHONPATH=src python benchmarks/distill_eval.py --split dev       # the only split tuned on

With ``--answers benchmarks/data/distill_faq_smollm2_test.jsonl`` (``make_distill_real_answers.py``)
the test backend returns SmolLM2-135M's recorded answer to each question instead, and only the
questions of that file are replayed (a slice of the FAQ test split). A served text is then
traced to the recorded answers it was cut from: **right** when those include an answer to every
family of the query, else **wrong** (an L3b fragment is one sentence of some earlier answer).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import redis
from support.fake_backends import FakeBackend
from support.procs import start_server
from support.proxy_procs import pion_args, start_proxy, wait_for_embedder

from pion.proxy.tools.replay import load_dataset, replay

DATA = Path(__file__).parent / "data"
SETS = ("distill_faq", "distill_diverse")
LAYERS = ("l1_cache", "l3_direct", "l3_composite", "l3b_fragment")
_ANSWERED = re.compile(r"Answer \d+ from \w+ to: (.*)")


def families_of(answer: str, family_of: dict[str, str]) -> set[str]:
    out: set[str] = set()
    for q in _ANSWERED.findall(answer or ""):
        fam = family_of.get(q.strip(), "?")
        out.update(fam.split("+"))
    return out


def sources_of(served: str, canned: dict[str, str], family_of: dict[str, str]) -> set[str]:
    """Families of the recorded answers ``served`` was taken from (contains it, or it contains them)."""
    served = (served or "").strip()
    out: set[str] = set()
    for q, ans in canned.items():
        if served and ans.strip() and (served in ans or ans.strip() in served):
            out.add(family_of[q])
    return {f for fam in out for f in fam.split("+")}


def run_one(rows: list[dict[str, Any]], family_of: dict[str, str], distill: bool, work: Path,
            extra: tuple[str, ...] = (), canned: dict[str, str] | None = None) -> dict[str, Any]:
    server = start_server(work / f"pion-{distill}")
    # Load the server's MiniLM before pion-serve asks: on a loaded box the first AI.EMBED can
    # outlast pion-serve's socket timeout, and its start-up probe then never settles the embedder.
    with redis.Redis(port=server.port, socket_timeout=900) as r:
        r.execute_command("AI.EMBED", "warm up")
    backend = FakeBackend("openai", canned=canned).start()
    proxy = start_proxy(work, "--backend", "vllm", "--backend-url", backend.url, *pion_args(server),
                        *(["--distill", *extra] if distill else []))
    try:
        wait_for_embedder(proxy, timeout_s=600)
        results = list(replay(rows, proxy.url, "fake-model", system="distill eval"))
        stats = proxy.stats()
    finally:
        proxy.stop()
        backend.stop()
        server.stop()
    caught: Counter[str] = Counter()
    wrong: Counter[str] = Counter()
    wrong_examples = []
    right_examples: list[tuple[str, str]] = []
    for row, res in zip(rows, results):
        src = res["source"]
        if src not in LAYERS:
            continue
        caught[src] += 1
        want = set(row["family"].split("+"))
        if (not want <= sources_of(res["answer"], canned, family_of) if canned
                else families_of(res["answer"], family_of) != want):
            wrong[src] += 1
            wrong_examples.append((src, row["question"], (res["answer"] or "")[:120]))
        elif canned and src == "l3b_fragment":
            right_examples.append((row["question"], (res["answer"] or "")[:160]))
    return {"n": len(rows), "caught": dict(caught), "wrong": dict(wrong), "errors":
            sum(r["source"] == "error" for r in results), "examples": wrong_examples[:10], "l3b_right": right_examples[:10],
            "l3_concepts": stats.get("l3_concepts"), "l3_fragments": stats.get("l3_fragments")}


def table(report: dict[str, dict[str, Any]]) -> str:
    head = "| replay (split, n) | distill | " + " | ".join(f"{layer} caught / wrong" for layer in LAYERS) + \
        " | all caught | wrong served (% of queries) |"
    lines = [head, "|---" * (4 + len(LAYERS)) + "|"]
    for key, r in report.items():
        n = r["n"]
        cells = [f"{r['caught'].get(layer, 0)} / {r['wrong'].get(layer, 0)}" for layer in LAYERS]
        total, bad = sum(r["caught"].values()), sum(r["wrong"].values())
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {total} ({100 * total / n:.1f}%) | "
                     f"{bad} ({100 * bad / n:.1f}%) |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=("dev", "test"), default="test")
    p.add_argument("--sets", nargs="*", default=list(SETS))
    p.add_argument("--json", type=Path)
    p.add_argument("--distill-args", default="", help="extra pion-serve flags for the distill-on runs")
    p.add_argument("--only-on", action="store_true", help="skip the distill-off runs (dev exploration)")
    p.add_argument("--answers", type=Path, help="recorded model answers (JSONL question/family/answer): "
                   "replay only these questions, answered with these texts")
    args = p.parse_args()
    report: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="distill-eval-") as tmp:
        for name in args.sets:
            all_rows = load_dataset(DATA / f"{name}.jsonl")
            family_of = {r["question"]: r["family"] for r in all_rows}
            rows = [r for r in all_rows if r["split"] == args.split]
            canned = None
            if args.answers:
                canned = {r["question"]: r["answer"] for r in load_dataset(args.answers)}
                rows = [r for r in rows if r["question"] in canned]
            for distill in ((True,) if args.only_on else (False, True)):
                key = f"{name.removeprefix('distill_')} ({args.split}, {len(rows)}) | {'on' if distill else 'off'}"
                report[key] = run_one(rows, family_of, distill, Path(tmp) / f"{name}-{distill}",
                                      tuple(args.distill_args.split()), canned)
                print(key, json.dumps({k: v for k, v in report[key].items() if k != "examples"}), flush=True)
                for ex in report[key]["examples"]:
                    print("   wrong:", ex, flush=True)
                for ex in report[key]["l3b_right"]:
                    print("   l3b right:", ex, flush=True)
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
