"""Which temperature / top_p should pion-llm use when a request omits them? (issue 24)

Runs SmolLM2-135M (the embedded Q4_1 build, as pion-llm serves it: the chat template, the
prompt cut into segments by ``plan_chat``) on ``data/sampling_defaults_eval.jsonl``: 32 short
factual questions, split dev/test before any run. An answer is right when it contains one of the
accepted strings. Sampled settings are run with several seeds. The default is chosen on dev;
the test figure is reported.

    PYTHONPATH=src HF_HUB_OFFLINE=1 python benchmarks/sampling_defaults_eval.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from pion.client.runtimes.transformers_runtime import generate_steps, load_model
from pion.llm.segments import plan_chat

DATA = Path(__file__).parent / "data" / "sampling_defaults_eval.jsonl"
CANDIDATES = {  # name -> (temperature, top_p)
    "OpenAI default (1.0 / 1.0)": (1.0, 1.0),
    "model card (0.2 / 0.9)": (0.2, 0.9),
    "greedy (0 / 1.0)": (0.0, 1.0),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3, help="runs per question for sampled settings")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    model, tok = load_model("smollm2-135m", device="cpu")
    results: dict[str, dict[str, list[bool]]] = {}
    started = time.perf_counter()
    for name, (temperature, top_p) in CANDIDATES.items():
        seeds = [None] if temperature == 0.0 else list(range(args.seeds))
        per_split: dict[str, list[bool]] = {"dev": [], "test": []}
        for row in rows:
            plan = plan_chat(tok, [{"role": "user", "content": row["question"]}])
            for seed in seeds:
                text = "".join(step.text for step in generate_steps(
                    model, tok, list(plan.ids), max_tokens=args.max_tokens, temperature=temperature,
                    top_p=top_p, seed=seed))
                per_split[row["split"]].append(any(a.lower() in text.lower() for a in row["accept"]))
        results[name] = per_split
        print(f"{name}: dev {sum(per_split['dev'])}/{len(per_split['dev'])}, "
              f"test {sum(per_split['test'])}/{len(per_split['test'])} "
              f"({time.perf_counter() - started:.0f} s so far)", flush=True)
    chosen = max(results, key=lambda n: sum(results[n]["dev"]) / len(results[n]["dev"]))
    print("\n| setting | dev accuracy | test accuracy |\n|---|---|---|")
    for name, per_split in results.items():
        dev, test = per_split["dev"], per_split["test"]
        mark = " (chosen on dev)" if name == chosen else ""
        print(f"| {name}{mark} | {sum(dev) / len(dev):.0%} ({sum(dev)}/{len(dev)}) | "
              f"{sum(test) / len(test):.0%} ({sum(test)}/{len(test)}) |")


if __name__ == "__main__":
    main()
