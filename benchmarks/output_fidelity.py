"""Output fidelity of every storage format through PionPromptCache (the codecs issue's table).

20 queries (5 system prompts x 4 questions) x 50-token greedy completions with the prefix restored
from pion-server, against the uncached model, on SmolLM2-135M (fp32 weights, CPU): first-token
agreement, identical-completion count, and mean sentence BLEU (sacrebleu, on the decoded text,
1.0 = identical). Every registered format, plus K fp16 + V in the format with boundary_protect=2.

Cost control: a restored completion is first checked by teacher forcing (one forward over suffix +
reference completion gives the argmax of every step); only from the first differing step on is it
decoded token by token. Identical completions therefore cost one forward.

    .venv/bin/python benchmarks/output_fidelity.py [--port P] [--queries 20] [--tokens 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from sacrebleu.metrics import BLEU

from pion import PionPromptCache, load_model
from pion.client.runtimes.transformers_runtime import (
    cache_forward_kwargs,
    encode_prompt,
    eos_ids,
    forward_logits,
    generate_ids,
)
from pion.codecs import codec_names

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_workload import POLICY, QUESTIONS, ROLES, chat_system, chat_user, start_server

BOUNDARY_FORMATS = ["fp8", "turbo4", "mlx4g32"]


def continue_greedy(model: Any, suffix: list[int], cache: Any, reference: list[int], max_tokens: int,
                    eos: set[int]) -> list[int]:
    """The greedy completion from ``cache``, reusing the agreed part of ``reference``."""
    ids = torch.tensor([suffix + reference])
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=True, **cache_forward_kwargs(model, cache)).logits[0]
    predicted = torch.argmax(logits[len(suffix) - 1:], dim=-1).tolist()
    agree = 0
    while agree < len(reference) and predicted[agree] == reference[agree]:
        agree += 1
    if agree == len(reference):
        return list(reference)
    out = list(reference[:agree])
    # Cut the cache back to prefix + suffix + the agreed tokens, then decode on from the first difference.
    n_keep = cache.get_seq_length() - (len(reference) - agree)
    cache.crop(n_keep - cache.get_seq_length())
    token = predicted[agree]
    while len(out) < max_tokens and token not in eos:
        out.append(token)
        if len(out) == max_tokens:
            break
        logits_1, cache = forward_logits(model, [token], cache)
        token = int(torch.argmax(logits_1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(device="cpu")
    eos = eos_ids(model, tok)
    per_prompt = max(1, args.queries // len(ROLES))
    queries = [(encode_prompt(tok, chat_system(f"{role} {POLICY}")), encode_prompt(tok, chat_user(q)))
               for role in ROLES for q in QUESTIONS[:per_prompt]][:args.queries]
    proc, tmp, port = None, None, args.port
    if port is None:
        tmp = tempfile.TemporaryDirectory(prefix="pion-fidelity-")
        proc, port = start_server(tmp.name)
    started = time.perf_counter()
    try:
        print(f"{len(queries)} queries x {args.tokens} tokens; uncached references...", flush=True)
        refs = [generate_ids(model, tok, p + s, max_tokens=args.tokens) for p, s in queries]
        ref_text = [tok.decode(r, skip_special_tokens=True) for r in refs]
        configs = [(f, 0) for f in codec_names()] + [(f, 2) for f in BOUNDARY_FORMATS if f in codec_names()]
        rows = []
        for fmt, bp in configs:
            first = same = 0
            bleu_sum = 0.0
            with PionPromptCache(model, vquant=fmt, boundary_protect=bp, port=port) as pc:
                for (prefix, suffix), ref, rtext in zip(queries, refs, ref_text, strict=True):
                    ns = pc.namespace_for(prefix, "fidelity")
                    pc.get_or_prefill(prefix, namespace=ns)  # make sure it is stored (miss on first use)
                    warm = pc.get_or_prefill(prefix, namespace=ns)
                    out = continue_greedy(model, suffix, warm, ref, args.tokens, eos)
                    first += int(out[:1] == ref[:1])
                    same += int(out == ref)
                    text = tok.decode(out, skip_special_tokens=True)
                    bleu_sum += 1.0 if out == ref else BLEU(effective_order=True).sentence_score(text, [rtext]).score / 100
                hits = pc.stats()["hits"]
            name = fmt if bp == 0 else f"K fp16 + V {fmt}, boundary_protect=2"
            rows.append((name, first, same, bleu_sum / len(queries), hits))
            print(f"  {name}: first {first}/{len(queries)}, identical {same}/{len(queries)}, "
                  f"BLEU {bleu_sum / len(queries):.3f} (hits {hits})", flush=True)
        n = len(queries)
        print(f"\n| Format | First-token | Identical {args.tokens}-token completions | Mean BLEU |")
        print("|---|---:|---:|---:|")
        for name, first, same, bleu, _ in rows:
            print(f"| {name} | {first}/{n} | {same}/{n} | {bleu:.3f} |")
        print(f"\ntotal {time.perf_counter() - started:.0f} s")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
