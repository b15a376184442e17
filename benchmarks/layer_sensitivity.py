"""Pick the layers that get more bits in a per-layer format mix, on a DEV split (issue 20).

Why: at <= 40% of fp16's bytes no single K/V format pair keeps SmolLM2's greedy text; if a few
layers are much more sensitive than the rest, storing those at 8 bits and the others at 5 bits
fits the same budget. The choice must not be made on the 20 test queries of
``output_fidelity.py`` (its QUESTIONS[:4] for each system prompt), so this uses the same five
system prompts with QUESTIONS[4:4 + --dev-questions] -- questions the test split never asks.

Method (in process, no server: the codecs are the ones the server runs): for each dev query,
prefill the prefix, take the uncached model's greedy reference completion and its next-token
distributions; then for each layer l, round-trip only layer l's K through ``--low-k`` and V
through ``--low-v`` (all other layers exact), feed suffix + reference (teacher forcing) and take
the mean KL(uncached || that) over the steps. The ``--high-layers`` layers with the largest
mean KL get ``--high-k``/``--high-v``, the others the low pair; the mix is written as JSON for
``output_fidelity.py --layer-mix``.

    .venv/bin/python benchmarks/layer_sensitivity.py [--dev-questions 2] [--tokens 30] [--high-layers 10] \
        [--out benchmarks/data/layer_mix_smollm2.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pion import load_model
from pion.client.runtimes.transformers_kv import KvShape, dynamic_cache
from pion.client.runtimes.transformers_runtime import (
    cache_forward_kwargs,
    encode_prompt,
    generate_ids,
    prefill,
)
from pion.codecs import get_codec
from pion.codecs.rotated import rotate_heads

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_workload import POLICY, QUESTIONS, ROLES, chat_system, chat_user

TEST_QUESTIONS = 4  # output_fidelity.py asks QUESTIONS[:4] of every system prompt
DEFAULT_OUT = Path(__file__).parent / "data" / "layer_mix_smollm2.json"


def round_trip(states: torch.Tensor, fmt: str, sink: int = 0, rotate: bool = False) -> torch.Tensor:
    """[1, H, N, D] through a codec in the V-store's [N, H*D] row layout, back to [1, H, N, D]; the
    first ``sink`` rows are replaced by row ``sink`` before encoding (out of every range) and restored
    exactly after; with ``rotate`` each head is Hadamard-rotated before the codec and rotated back after."""
    _, heads, n, head_dim = states.shape
    rows = np.ascontiguousarray(states[0].transpose(0, 1).reshape(n, heads * head_dim).float().numpy())
    if rotate:
        rows = rotate_heads(rows, head_dim)
    stored = rows.copy()
    if 0 < sink < n:
        stored[:sink] = stored[sink]
    codec = get_codec(fmt)
    back = np.array(codec.decode(codec.encode(stored), heads * head_dim))
    back[:sink] = rows[:sink]
    if rotate:
        back = rotate_heads(back, head_dim)
    return torch.from_numpy(back).reshape(n, heads, head_dim).transpose(0, 1).unsqueeze(0).contiguous()


def dev_queries(tok: Any, dev_questions: int, first: int = 0) -> list[tuple[list[int], list[int]]]:
    """(prefix, suffix) token ids of the dev split: every system prompt with QUESTIONS past the
    test split's (module docstring), from the ``first``-th dev question on."""
    dev = QUESTIONS[TEST_QUESTIONS + first:TEST_QUESTIONS + first + dev_questions]
    return [(encode_prompt(tok, chat_system(f"{role} {POLICY}")), encode_prompt(tok, chat_user(q)))
            for role in ROLES for q in dev]


def dev_reference(model: Any, tok: Any, prefix: list[int], suffix: list[int], tokens: int, n_layers: int
                  ) -> tuple[list[int], torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """One dev query's uncached greedy reference, its next-token log-probabilities over the
    reference's steps, and the prefix's exact K/V per layer (what the screens quantize)."""
    reference = generate_ids(model, tok, prefix + suffix, max_tokens=tokens)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prefix + suffix + reference])).logits[0]
    first = len(prefix) + len(suffix) - 1
    ref_logp = torch.log_softmax(logits[first:first + len(reference)].float(), dim=-1)
    cache = prefill(model, prefix)
    exact = [(cache.layers[j].keys, cache.layers[j].values) for j in range(n_layers)]
    return reference, ref_logp, exact


def kl_with(model: Any, layers: list[tuple[torch.Tensor, torch.Tensor]], suffix: list[int], reference: list[int],
            ref_logp: torch.Tensor) -> float:
    """Mean KL(uncached || restored) over the reference's steps, with ``layers`` as the prefix cache."""
    cache = dynamic_cache(model.config, [(k.clone(), v.clone()) for k, v in layers], torch.float32)
    ids = torch.tensor([suffix + reference])
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=True, **cache_forward_kwargs(model, cache)).logits[0]
    restored = torch.log_softmax(logits[len(suffix) - 1:len(suffix) - 1 + len(reference)].float(), dim=-1)
    return float((ref_logp.exp() * (ref_logp - restored)).sum(-1).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dev-questions", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--high-layers", type=int, default=10)
    parser.add_argument("--low-k", default="kivi5g64")
    parser.add_argument("--low-v", default="int5h64")
    parser.add_argument("--high-k", default="kivi8g128")
    parser.add_argument("--high-v", default="int8h64")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    model, tok = load_model(device="cpu")
    shape = KvShape.from_config(model.config)
    queries = dev_queries(tok, args.dev_questions)
    per_layer = np.zeros(shape.n_layers)
    for i, (prefix, suffix) in enumerate(queries):
        reference, ref_logp, exact = dev_reference(model, tok, prefix, suffix, args.tokens, shape.n_layers)
        for layer in range(shape.n_layers):
            layers = list(exact)
            layers[layer] = (round_trip(exact[layer][0], args.low_k), round_trip(exact[layer][1], args.low_v))
            per_layer[layer] += kl_with(model, layers, suffix, reference, ref_logp) / len(queries)
        print(f"dev query {i + 1}/{len(queries)} done ({time.perf_counter() - started:.0f} s)", flush=True)
    high = sorted(int(j) for j in np.argsort(-per_layer)[:args.high_layers])
    k = [args.high_k if j in high else args.low_k for j in range(shape.n_layers)]
    v = [args.high_v if j in high else args.low_v for j in range(shape.n_layers)]
    stored = sum(get_codec(f).row_bytes(shape.kv_dim) for f in k + v) / (shape.n_layers * 4 * shape.kv_dim)
    label = (f"K {args.high_k} + V {args.high_v} on dev-chosen layers {high}, "
             f"K {args.low_k} + V {args.low_v} elsewhere")
    args.out.write_text(json.dumps({
        "label": label, "k": k, "v": v, "bytes_vs_fp16": stored,
        "dev_split": f"{len(ROLES)} system prompts x QUESTIONS[{TEST_QUESTIONS}:{TEST_QUESTIONS + args.dev_questions}]",
        "mean_kl_per_layer": [round(float(x), 6) for x in per_layer],
    }, indent=1) + "\n")
    print("| layer | mean KL with only this layer at the low pair |")
    print("|---:|---:|")
    for j in np.argsort(-per_layer):
        print(f"| {j} | {per_layer[j]:.5f} |")
    print(f"\n{label}: {100 * stored:.1f}% of fp16 -> {args.out} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
