"""Cache real SmolLM2-135M answers for the FAQ replay, so the --distill L3b run is repeatable.

``distill_eval.py`` normally answers with the OpenAI-compatible test server, whose answers
name their question ("Answer 3 from openai to: <question>"): a stored fragment is then one
sentence about one question, which measures L3b's safety but not what it does with real
answer sentences. This script asks the real SmolLM2-135M-Instruct (the model pion-llm
serves, loaded with ``pion.load_model``; chat template, greedy, the same system prompt for
every question) each question of the chosen split of ``distill_faq.jsonl`` once and writes
``{"question", "family", "answer"}`` rows to ``benchmarks/data/distill_faq_smollm2_<split>.jsonl``.
``distill_eval.py --answers <that file>`` then replays those answers through the test backend,
which returns the cached model output for each question (same wire format, no model in the loop).

Generation is batched in-process (left padding) rather than sent one request at a time to
pion-llm: on this shared 2-core box one pion-llm answer took ~60 s under load, a batch of 16
decodes in little more than the time of one.

    PYTHONPATH=src python benchmarks/make_distill_real_answers.py --split test --intents 7   # 50 questions

A slice, not the whole split: on this shared box (load ~15 on 2 cores) a batch of 8 answers
takes minutes of wall time, so 7 of the test split's 20 intents (42 paraphrases, 7 traps,
1 two-part question) is what fits in about ten minutes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

DATA = Path(__file__).parent / "data"
SYSTEM = "You are a customer support assistant. Answer the user's question in two or three short sentences."


def select(rows: list[dict], split: str, intents: int) -> list[dict]:
    """The split's rows whose every family belongs to its first ``intents`` paraphrase intents."""
    rows = [r for r in rows if r["split"] == split]
    pick = sorted({r["family"] for r in rows if r["kind"] == "paraphrase"})[:intents]
    return [r for r in rows if all(f.removesuffix("-trap") in pick for f in r["family"].split("+"))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=("dev", "test"), default="test")
    p.add_argument("--intents", type=int, default=7,
                   help="the first N intents of the split (sorted), with their traps and two-part questions")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    import pion

    rows = [json.loads(line) for line in (DATA / "distill_faq.jsonl").read_text().splitlines() if line.strip()]
    rows = select(rows, args.split, args.intents)
    out = DATA / f"distill_faq_smollm2_{args.split}.jsonl"
    done = set()
    if out.exists():
        done = {json.loads(line)["question"] for line in out.read_text().splitlines() if line.strip()}
    todo = [r for r in rows if r["question"] not in done]
    torch.set_num_threads(1)
    model, tok = pion.load_model(device="cpu")
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    with open(out, "a", encoding="utf-8") as f:
        for start in range(0, len(todo), args.batch):
            batch = todo[start:start + args.batch]
            t0 = time.perf_counter()
            texts = [tok.apply_chat_template([{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": r["question"]}],
                                             tokenize=False, add_generation_prompt=True) for r in batch]
            enc = tok(texts, return_tensors="pt", padding=True)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=args.max_tokens, do_sample=False,
                                     pad_token_id=tok.pad_token_id)
            for r, ids in zip(batch, gen[:, enc["input_ids"].shape[1]:]):
                answer = tok.decode(ids, skip_special_tokens=True).strip()
                f.write(json.dumps({"question": r["question"], "family": r["family"], "answer": answer}) + "\n")
            f.flush()
            print(f"{start + len(batch)}/{len(todo)} in {time.perf_counter() - t0:.1f}s: "
                  f"{batch[0]['question']!r} -> {answer[:60]!r}", flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
