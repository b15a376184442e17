"""Choose, layer by layer, how many bits K and V get within a fixed byte budget, on a DEV split (issue 20).

Why: at 306 bytes a token (39.8% of fp16's, SmolLM2's kv_dim 192) three sink-row pairs fit the same
bytes -- K 7 / V 5, K 6 / V 6 and K 5 / V 7 bits (``kivi{7,6,5}g128s`` + ``int{5,6,7}h64s128``) -- and
the third round's test run found K the larger error overall, but not which layers. A per-layer
SCHEMA can give each layer its own pair, and bytes can move between layers too: a layer that hardly
cares can drop to 5/5 bits so a sensitive one gets 7/7, as long as the mean stays at 12 bits (every
bit of a side costs the same 24 bytes at kv_dim 192). The choice must not be made on the 20 test
queries of ``output_fidelity.py`` (QUESTIONS[:4] of every system prompt), so this uses
QUESTIONS[4:4 + --dev-questions].

Method (in process, the server's codecs): for each dev query, each layer l and each pair
(K ``kivi{b}g128s``, V ``int{c}h64s128``, b in 5..8, c in 4..7), only layer l goes through the pair (all
other layers exact); feed suffix + the uncached greedy reference (teacher forcing) and take the mean
KL(uncached || that) over the steps. Then pick one pair per layer minimising the summed KL with
sum(b + c) <= 12 * n_layers (an exact knapsack over layers; it treats layers' KL as additive, which
the dev screen of the result checks), or with b + c = 12 on every layer (``--same-bytes``). The mix
is written as JSON for ``output_fidelity.py --layer-mix`` and ``fidelity_screen.py @<file>``.

    .venv/bin/python benchmarks/kv_bit_split.py [--dev-questions 2] [--tokens 30] [--same-bytes] \
        [--table <an earlier output.json>] [--pairs K8/V6 ...] [--layers 18 23 ...] [--more-questions 2] \
        [--out benchmarks/data/kv_bit_split_smollm2.json]

``--table`` reuses an earlier output's per-layer KL for the pairs it holds and measures only the rest.
Fifth round: the menu is K 5..8 bits (``kivi8g128s``) x V 4..7 (``int4h64s128``), the same 24 bytes a
bit; ``--pairs`` and
``--layers`` measure only the cells named (the rest stay null in the JSON and the knapsack does not
offer them there), so a wider menu costs only the cells that can pay; ``--more-questions N`` re-measures
the ``--pairs`` of the named layers on the next N dev questions and keeps the mean over all of them (the
layers that carry the error get more queries; ``dev_questions_per_layer`` in the JSON says which; pairs
left out of ``--pairs`` are no longer offered there, so every pair offered on a layer has the same queries).
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
from pion.client.runtimes.transformers_kv import KvShape
from pion.codecs import get_codec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kv_bit_budget import K_BITS, V_BITS, choose, pair_formats, pair_key
from layer_sensitivity import TEST_QUESTIONS, dev_queries, dev_reference, kl_with, round_trip
from ttft_workload import ROLES

DEFAULT_OUT = Path(__file__).parent / "data" / "kv_bit_split_smollm2.json"
Cell = tuple[int, int, int]  # (layer, K bits, V bits)


def measure(model: Any, tok: Any, n_layers: int, cells: list[Cell], tokens: int, dev_questions: int,
            first: int, started: float) -> np.ndarray:
    """Mean KL per cell over the dev queries QUESTIONS[4 + first : 4 + first + dev_questions]."""
    queries = dev_queries(tok, dev_questions, first) if cells else []
    measured = np.zeros(len(cells))
    for i, (prefix, suffix) in enumerate(queries):
        reference, ref_logp, exact = dev_reference(model, tok, prefix, suffix, tokens, n_layers)
        for s, (layer, b, c) in enumerate(cells):
            k_fmt, v_fmt = pair_formats(b, c)
            mixed = list(exact)
            mixed[layer] = (round_trip(exact[layer][0], k_fmt, 0), round_trip(exact[layer][1], v_fmt, 0))
            measured[s] += kl_with(model, mixed, suffix, reference, ref_logp) / len(queries)
        print(f"dev query {i + 1}/{len(queries)} done ({time.perf_counter() - started:.0f} s)", flush=True)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dev-questions", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--same-bytes", action="store_true", help="K + V = 12 bits on every layer")
    parser.add_argument("--table", type=Path, help="reuse this earlier output's KL for the pairs it holds")
    parser.add_argument("--pairs", nargs="+", metavar="K8/V6",
                        help="measure only these pairs (default: the whole menu)")
    parser.add_argument("--layers", type=int, nargs="+", help="measure only these layers (the rest stay null)")
    parser.add_argument("--more-questions", type=int, default=0,
                        help="with --table and --layers: re-measure the --pairs (default: all) on those layers on the "
                             "next N dev questions and keep the mean over all of them; other pairs leave those layers")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if args.more_questions and (args.table is None or args.layers is None):
        parser.error("--more-questions needs --table and --layers")
    torch.set_num_threads(1)
    started = time.perf_counter()
    model, tok = load_model(device="cpu")
    shape = KvShape.from_config(model.config)
    earlier = json.loads(args.table.read_text()) if args.table else {}
    kl: dict[str, list[float | None]] = earlier.get("mean_kl_per_layer", {})
    per_layer: list[int] = earlier.get("dev_questions_per_layer", [args.dev_questions] * shape.n_layers)
    layers = args.layers if args.layers is not None else list(range(shape.n_layers))
    if args.more_questions and any(per_layer[layer] != args.dev_questions for layer in layers):
        parser.error("--more-questions: a layer named already has more than --dev-questions questions")
    menu = [(b, c) for b in K_BITS for c in V_BITS if args.pairs is None or pair_key(b, c) in args.pairs]
    cells = [(layer, b, c) for b, c in menu for layer in layers
             if pair_key(b, c) not in kl or kl[pair_key(b, c)][layer] is None]
    measured = measure(model, tok, shape.n_layers, cells, args.tokens, args.dev_questions, 0, started)
    for s, (layer, b, c) in enumerate(cells):
        kl.setdefault(pair_key(b, c), [None] * shape.n_layers)[layer] = round(float(measured[s]), 7)
    if args.more_questions:
        offered = {pair_key(b, c) for b, c in menu}
        for key in set(kl) - offered:  # a pair left out of --pairs is not offered on these layers any more
            for layer in layers:
                kl[key][layer] = None
        more = [(layer, int(key[1]), int(key[4])) for key in sorted(offered & set(kl)) for layer in layers
                if kl[key][layer] is not None]
        extra = measure(model, tok, shape.n_layers, more, args.tokens, args.more_questions, args.dev_questions, started)
        for s, (layer, b, c) in enumerate(more):
            old, n_old = float(kl[pair_key(b, c)][layer] or 0.0), args.dev_questions  # not None: see `more`
            kl[pair_key(b, c)][layer] = round((n_old * old + args.more_questions * float(extra[s]))
                                              / (n_old + args.more_questions), 7)
        for layer in layers:
            per_layer[layer] = args.dev_questions + args.more_questions
    chosen = choose(kl, shape.n_layers, args.same_bytes)
    k = [pair_formats(b, c)[0] for b, c in chosen]
    v = [pair_formats(b, c)[1] for b, c in chosen]
    stored = sum(get_codec(f).row_bytes(shape.kv_dim) for f in k + v) / (shape.n_layers * 4 * shape.kv_dim)
    counts = {pair_key(b, c): chosen.count((b, c)) for b in K_BITS for c in V_BITS if (b, c) in chosen}
    kind = "same bytes every layer" if args.same_bytes else "bytes moved between layers"
    label = f"per-layer K/V bits (dev-chosen, {kind}): " + ", ".join(f"{n} layers {p}" for p, n in counts.items())
    args.out.write_text(json.dumps({
        "label": label, "k": k, "v": v, "bytes_vs_fp16": stored,
        "dev_split": f"{len(ROLES)} system prompts x QUESTIONS[{TEST_QUESTIONS}:{TEST_QUESTIONS + args.dev_questions}]",
        "predicted_kl_sum": sum(kl[pair_key(b, c)][j] for j, (b, c) in enumerate(chosen)),
        "dev_questions_per_layer": per_layer,
        "mean_kl_per_layer": kl,
    }, indent=1) + "\n")
    keys = sorted(kl)
    print("| layer | " + " | ".join(keys) + " | chosen |")
    print("|---:|" + "---:|" * len(keys) + "---|")
    for j in range(shape.n_layers):
        cols = " | ".join("-" if kl[key][j] is None else f"{kl[key][j]:.6f}" for key in keys)
        print(f"| {j} | {cols} | {pair_key(*chosen[j])} |")
    print(f"\n{label}: {100 * stored:.1f}% of fp16 -> {args.out} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
