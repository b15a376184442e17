"""Output fidelity of every storage format through PionPromptCache (the codecs issues' table).

20 queries (5 system prompts x 4 questions) x 50-token greedy completions with the prefix restored
from pion-server, against the uncached model, on SmolLM2-135M (fp32 weights, CPU). Per format or mix:

* bytes stored, as % of fp16 (both sides, every layer, at the model's kv_dim);
* first-token agreement and identical 50-token completions (exact match of the greedy text);
* teacher-forced top-1 agreement: the restored model is fed the *reference* completion, and at each
  of the 50 steps its argmax is compared with the uncached model's argmax -- so one near-tie that
  flips the greedy text counts as one step, not as a lost completion;
* mean KL(uncached || restored) of the next-token distributions over those steps, in nats;
* mean sentence BLEU (sacrebleu, on the decoded text, 1.0 = identical).

Configurations: every registered format on both sides (formats the model's kv_dim cannot use are
listed as skipped), K fp16 + V in a format with boundary_protect=2, and mixes through
KV.PREFIX.REGISTER.SCHEMA (``MIXES``: K and V in different formats, optionally fp16 on the first
and last layers).

Cost control: a restored completion is checked by teacher forcing (one forward over suffix +
reference completion gives every step's logits); only from the first differing step on is it
decoded token by token. The server is flushed between configurations.

    .venv/bin/python benchmarks/output_fidelity.py [--port P] [--queries 20] [--tokens 50] [--only NAME ...]
        [--layer-mix benchmarks/data/layer_mix_smollm2.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import torch
from sacrebleu.metrics import BLEU

from pion import PionPromptCache, load_model
from pion.client.prefix_transport import LayerFormats
from pion.client.runtimes.transformers_kv import KvShape
from pion.client.runtimes.transformers_runtime import (
    cache_forward_kwargs,
    encode_prompt,
    eos_ids,
    forward_logits,
    generate_ids,
)
from pion.codecs import codec_names, get_codec
from pion.common.errors import CodecError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_workload import POLICY, QUESTIONS, ROLES, chat_system, chat_user, start_server

BOUNDARY_FORMATS = ["fp8", "turbo4", "mlx4g32"]
# (K format, V format, layers kept fp16 at each end): the KIVI pair (K per channel, V per token)
# at each token group, and the pairings that fit the byte targets (<= 40%, <= 52%).
MIXES: list[tuple[str, str, int, str, str]] = [  # K, V, edge layers, edge K, edge V
    ("kivi4g32", "mlx4g32", 0, "fp16", "fp16"),
    ("kivi4g64", "mlx4g32", 0, "fp16", "fp16"),
    ("kivi4g128", "mlx4g32", 0, "fp16", "fp16"),
    ("kivi4g32", "mlx4g32", 1, "fp16", "fp16"),
    ("kivi4g32", "int8h64", 0, "fp16", "fp16"),
    ("kivi4g64", "int8h64", 0, "fp16", "fp16"),
    ("kivi4g128", "int8h64", 0, "fp16", "fp16"),
    ("kivi8g128", "int8h64", 0, "fp16", "fp16"),
    ("kivi8g64", "int8", 0, "fp16", "fp16"),
    ("kivi8g128", "turbo4", 0, "fp16", "fp16"),
    ("kivi8g128", "mlx4g32", 0, "fp16", "fp16"),
    ("kivi4g64", "mlx4g32", 7, "kivi8g128", "int8h64"),  # 8-bit on 7+7 edge layers, 4-bit between
    # the 5- and 6-bit formats (<= 40% of fp16's bytes): K per channel, V per token with a scale per head
    ("kivi6g128", "int6h64", 0, "fp16", "fp16"),
    ("kivi6g64", "int6h64", 0, "fp16", "fp16"),
    ("kivi6g32", "int5h64", 0, "fp16", "fp16"),
    ("kivi6g64", "int5h64", 0, "fp16", "fp16"),
    ("kivi5g32", "int6h64", 0, "fp16", "fp16"),
    ("kivi5g64", "int6h64", 0, "fp16", "fp16"),
    ("kivi6g128", "mlx4g32", 0, "fp16", "fp16"),
    ("kivi8g128", "int5h64", 0, "fp16", "fp16"),
    # third round: 7-bit V beside 4/5-bit K, and the formats that keep each 128-token group's first row
    # (the attention sink) in fp16 -- every pair at 39.8% of fp16's bytes but the first
    ("kivi4g64", "int7h64", 0, "fp16", "fp16"),
    ("kivi5g64", "int7h64", 0, "fp16", "fp16"),
    ("kivi6g128s", "int6h64s128", 0, "fp16", "fp16"),
    ("kivi5g128s", "int7h64s128", 0, "fp16", "fp16"),
    ("kivi7g128s", "int5h64s128", 0, "fp16", "fp16"),
    # ... and V on Hadamard-rotated heads with the sink row (same bytes)
    ("kivi6g128s", "int6h64rs128", 0, "fp16", "fp16"),
    ("kivi7g128s", "int5h64rs128", 0, "fp16", "fp16"),
]


def teacher_forced(model: Any, suffix: list[int], cache: Any, reference: list[int]) -> torch.Tensor:
    """Logits [len(reference) + 1, vocab] after suffix + each reference token (the cache grows)."""
    ids = torch.tensor([suffix + reference])
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=True, **cache_forward_kwargs(model, cache)).logits[0]
    return logits[len(suffix) - 1:].float()


def continue_greedy(model: Any, cache: Any, reference: list[int], predicted: list[int], max_tokens: int,
                    eos: set[int]) -> list[int]:
    """The greedy completion from ``cache`` (which already holds suffix + reference), reusing the
    agreed part of ``reference``: cut the cache back to the first difference and decode on from it."""
    agree = 0
    while agree < len(reference) and predicted[agree] == reference[agree]:
        agree += 1
    if agree == len(reference):
        return list(reference)
    out = list(reference[:agree])
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


def reference_logprobs(model: Any, prefix: list[int], suffix: list[int], reference: list[int]) -> torch.Tensor:
    """The uncached model's next-token log-probabilities at each of the reference's steps."""
    ids = torch.tensor([prefix + suffix + reference])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0]
    first = len(prefix) + len(suffix) - 1
    return torch.log_softmax(logits[first:first + len(reference)].float(), dim=-1)


def bytes_vs_fp16(formats: LayerFormats, kv_dim: int) -> float:
    """Stored bytes per token (all layers, both sides) as a fraction of fp16's."""
    stored = sum(get_codec(f).row_bytes(kv_dim) for f in (*formats.k, *formats.v))
    return stored / (len(formats.k) * 2 * 2 * kv_dim)


def configurations(shape: KvShape) -> tuple[list[tuple[str, LayerFormats]], list[str]]:
    """(label, formats) of every configuration this model can use, and the skipped ones."""
    n = shape.n_layers
    out: list[tuple[str, LayerFormats]] = []
    skipped: list[str] = []
    for fmt in codec_names():
        try:
            get_codec(fmt).check_dim(shape.kv_dim)
        except CodecError as e:
            skipped.append(f"{fmt} ({e})")
            continue
        out.append((fmt, LayerFormats.uniform(fmt, n)))
    for fmt in BOUNDARY_FORMATS:
        out.append((f"K fp16 + V {fmt}, boundary_protect=2", LayerFormats.boundary_protected(fmt, n, 2)))
    for k_fmt, v_fmt, protect, edge_k, edge_v in MIXES:
        edges = "fp16" if (edge_k, edge_v) == ("fp16", "fp16") else f"K {edge_k} + V {edge_v}"
        label = f"K {k_fmt} + V {v_fmt}" + (f", {edges} on {protect}+{protect} edge layers" if protect else "")
        out.append((label, LayerFormats.mixed(k_fmt, v_fmt, n, protect, edge_k, edge_v)))
    return out, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="*", help="run only the configurations with these labels")
    parser.add_argument("--layer-mix", type=Path, action="append", default=[],
                        help="also run a per-layer mix written by layer_sensitivity.py (JSON: label, k, v)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(device="cpu")
    eos = eos_ids(model, tok)
    shape = KvShape.from_config(model.config)
    per_prompt = max(1, args.queries // len(ROLES))
    queries = [(encode_prompt(tok, chat_system(f"{role} {POLICY}")), encode_prompt(tok, chat_user(q)))
               for role in ROLES for q in QUESTIONS[:per_prompt]][:args.queries]
    configs, skipped = configurations(shape)
    for path in args.layer_mix:  # per-layer mixes chosen on the dev split (benchmarks/layer_sensitivity.py)
        mix = json.loads(path.read_text())
        configs.append((mix["label"], LayerFormats(tuple(mix["k"]), tuple(mix["v"]), schema=True)))
    if args.only:  # in the order given (the most wanted first, on a busy machine)
        by_label = dict(configs)
        unknown = [label for label in args.only if label not in by_label]
        if unknown:
            parser.error(f"unknown configuration(s) {unknown}; known: {list(by_label)}")
        configs = [(label, by_label[label]) for label in args.only]
    proc, tmp, port = None, None, args.port
    if port is None:
        tmp = tempfile.TemporaryDirectory(prefix="pion-fidelity-")
        proc, port = start_server(tmp.name)
    started = time.perf_counter()
    try:
        print(f"{len(queries)} queries x {args.tokens} tokens, kv_dim {shape.kv_dim}, {shape.n_layers} layers; "
              f"uncached references...", flush=True)
        refs = [generate_ids(model, tok, p + s, max_tokens=args.tokens) for p, s in queries]
        ref_text = [tok.decode(r, skip_special_tokens=True) for r in refs]
        ref_logp = [reference_logprobs(model, p, s, r) for (p, s), r in zip(queries, refs, strict=True)]
        rows = []
        for label, formats in configs:
            redis.Redis(port=port).flushall()
            first = same = steps = top1 = 0
            bleu_sum = kl_sum = 0.0
            with PionPromptCache(model, port=port, layer_formats=formats) as pc:
                for (prefix, suffix), ref, rtext, logp in zip(queries, refs, ref_text, ref_logp, strict=True):
                    ns = pc.namespace_for(prefix, "fidelity")
                    pc.get_or_prefill(prefix, namespace=ns)  # make sure it is stored (miss on first use)
                    warm = pc.get_or_prefill(prefix, namespace=ns)
                    logits = teacher_forced(model, suffix, warm, ref)
                    restored = torch.log_softmax(logits[:len(ref)], dim=-1)
                    top1 += int((restored.argmax(-1) == logp.argmax(-1)).sum())
                    kl_sum += float((logp.exp() * (logp - restored)).sum())
                    steps += len(ref)
                    out = continue_greedy(model, warm, ref, logits.argmax(-1).tolist(), args.tokens, eos)
                    first += int(out[:1] == ref[:1])
                    same += int(out == ref)
                    text = tok.decode(out, skip_special_tokens=True)
                    bleu_sum += 1.0 if out == ref else BLEU(effective_order=True).sentence_score(text, [rtext]).score / 100
                hits = pc.stats()["hits"]
            n = len(queries)
            row = (label, 100 * bytes_vs_fp16(formats, shape.kv_dim), first, same, top1 / steps, kl_sum / steps,
                   bleu_sum / n, hits)
            rows.append(row)
            print(f"  {label}: {row[1]:.1f}% of fp16, first {first}/{n}, identical {same}/{n}, top-1 "
                  f"{100 * row[4]:.2f}%, KL {row[5]:.5f}, BLEU {row[6]:.3f} (hits {hits})", flush=True)
        n = len(queries)
        print(f"\n| Format | Bytes vs fp16 | First-token | Identical {args.tokens}-token completions | "
              "Teacher-forced top-1 | Mean KL (nats) | Mean BLEU |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, pct, first, same, top1_rate, kl, bleu, _ in rows:
            print(f"| {label} | {pct:.1f}% | {first}/{n} | {same}/{n} | {100 * top1_rate:.2f}% | {kl:.5f} | "
                  f"{bleu:.3f} |")
        for item in skipped:
            print(f"skipped: {item}")
        print(f"\ntotal {time.perf_counter() - started:.0f} s")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
