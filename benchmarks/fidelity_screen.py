"""Screen K/V format pairs on a DEV split before the test run of output_fidelity.py (issue 20).

Why: output_fidelity.py's 20 test queries must not choose the configurations they then grade, and
one of its rows costs minutes through a real server. This runs the same codecs in process (each
layer's K and V round-tripped through the format, the whole prefix as one blob, as the V-store
encodes a V.STOREBATCH of the prefix) on queries the test split never asks -- the same five system
prompts with QUESTIONS[4:4 + --dev-questions] -- and reports what output_fidelity.py reports:
identical greedy completions, teacher-forced top-1 agreement and mean KL.

A configuration is ``K_FORMAT:V_FORMAT`` with optional ``+sinkS`` (the first S tokens of every layer
kept exact and left out of the K token group's ranges -- an emulation, to see whether protecting the
attention-sink tokens would pay before building a format for it) and/or ``+rotv`` (V's heads
Hadamard-rotated around V's format, as ``pion.codecs.rotated`` does), e.g. ``kivi6g128:int6h64+rotvsink1``;
or ``@<file.json>``, a per-layer mix as ``layer_sensitivity.py``/``kv_bit_split.py`` write it (keys k, v:
one format per layer), run as a per-layer SCHEMA would store it. ``--exact-tail k|v|kv`` keeps the last
n % 128 rows of every layer's K and/or V exact in every configuration of the run (an emulation, to
see what the per-token tail rows of the 128-token-group formats cost).

    .venv/bin/python benchmarks/fidelity_screen.py [--dev-questions 3] [--tokens 50] \
        kivi6g64:int6h64 kivi5g64:int7h64 "kivi5g64:int6h64+sink4" ...
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from pion import load_model
from pion.client.runtimes.transformers_kv import KvShape, dynamic_cache
from pion.client.runtimes.transformers_runtime import eos_ids
from pion.codecs import get_codec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layer_sensitivity import dev_queries, dev_reference, round_trip
from output_fidelity import continue_greedy, teacher_forced


def with_exact_tail(pair: tuple[torch.Tensor, torch.Tensor], exact: tuple[torch.Tensor, torch.Tensor],
                    sides: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, V) round-tripped, with the rows after the last full 128-token group taken from ``exact``
    on the named sides ("k", "v" or "kv")."""
    out = []
    for side, got, ref in zip("kv", pair, exact):
        start = ref.shape[2] // 128 * 128
        if side in sides and start < ref.shape[2]:
            got = got.clone()
            got[:, :, start:] = ref[:, :, start:].to(got.dtype)
        out.append(got)
    return out[0], out[1]


def parse_config(text: str) -> tuple[str, str, int, bool]:
    """``K:V[+[rotv][sinkS]]`` -> (K format, V format, S, rotate V)."""
    pair, _, extra = text.partition("+")
    k_fmt, v_fmt = pair.split(":")
    rotate = "rotv" in extra
    extra = extra.replace("rotv", "")
    sink = int(extra.removeprefix("sink")) if extra else 0
    return k_fmt, v_fmt, sink, rotate


def stored_fraction(k_fmt: str, v_fmt: str, kv_dim: int) -> float:
    """Bytes per token (both sides) as a fraction of fp16's, sink rows not counted."""
    return (get_codec(k_fmt).row_bytes(kv_dim) + get_codec(v_fmt).row_bytes(kv_dim)) / (4 * kv_dim)


def layer_formats(text: str, n_layers: int) -> list[tuple[str, str, int, bool]]:
    """A config -> per layer (K format, V format, S, rotate V)."""
    if text.startswith("@"):
        mix = json.loads(Path(text[1:]).read_text())
        if len(mix["k"]) != n_layers or len(mix["v"]) != n_layers:
            raise SystemExit(f"{text}: needs {n_layers} K and V formats")
        per_layer = [(k, v, 0, False) for k, v in zip(mix["k"], mix["v"])]
    else:
        per_layer = [parse_config(text)] * n_layers
    return per_layer


def mean_fraction(per_layer: list[tuple[str, str, int, bool]], kv_dim: int) -> float:
    """Bytes a token over all layers as a fraction of fp16's."""
    return sum(stored_fraction(k, v, kv_dim) for k, v, _, _ in per_layer) / len(per_layer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--dev-questions", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--exact-tail", choices=["k", "v", "kv"], default="",
                        help="keep each layer's last n %% 128 rows of K and/or V exact (emulation)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    model, tok = load_model(device="cpu")
    eos = eos_ids(model, tok)
    shape = KvShape.from_config(model.config)
    queries = dev_queries(tok, args.dev_questions)
    prepared = [(suffix, *dev_reference(model, tok, prefix, suffix, args.tokens, shape.n_layers))
                for prefix, suffix in queries]
    print(f"{len(queries)} dev queries x {args.tokens} tokens ({time.perf_counter() - started:.0f} s)", flush=True)
    print("| K : V | bytes vs fp16 | identical | top-1 | mean KL |\n|---|---:|---:|---:|---:|")
    for text in args.configs:
        per_layer = layer_formats(text, shape.n_layers)
        same = steps = top1 = 0
        kl = 0.0
        for suffix, ref, logp, exact in prepared:
            layers = [(round_trip(k, k_fmt, sink), round_trip(v, v_fmt, sink, rotate))
                      for (k, v), (k_fmt, v_fmt, sink, rotate) in zip(exact, per_layer)]
            if args.exact_tail:
                layers = [with_exact_tail(pair, ex, args.exact_tail) for pair, ex in zip(layers, exact)]
            cache = dynamic_cache(model.config, layers, torch.float32)
            logits = teacher_forced(model, suffix, cache, ref)
            restored = torch.log_softmax(logits[:len(ref)], dim=-1)
            top1 += int((restored.argmax(-1) == logp.argmax(-1)).sum())
            kl += float((logp.exp() * (logp - restored)).sum())
            steps += len(ref)
            same += int(continue_greedy(model, cache, ref, logits.argmax(-1).tolist(), args.tokens, eos) == ref)
        print(f"| {text} | {100 * mean_fraction(per_layer, shape.kv_dim):.1f}% | {same}/{len(prepared)} | "
              f"{100 * top1 / steps:.2f}% | {kl / steps:.6f} |", flush=True)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
