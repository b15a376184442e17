"""Hybrid / recurrent models: warm (restored from pion-server) vs cold TTFT by prefix length.

The spec's Qwen3.5 table shape on random-weight models built here (no checkpoint download):

  qwen3_next  GatedDeltaNet + full attention, 3:1 like Qwen3.5 (8 layers: 6 recurrent, 2 attention),
              hidden 256, 4 heads (2 KV) x 64
  mamba2      pure SSM (4 layers), hidden 256, state 64 — its state does not grow with the prefix

For each prefix length L: cold = one forward of prefix + 8-token suffix from an empty cache (the
first token's logits: what a server without Pion does); warm = PionPromptCache.get_or_prefill on
a hit (KV.PREFIX.LOOKUP + one pipelined V.MFETCH x2 + SSM.PREFIX.MFETCH round trip + rebuilding
the cache) then the suffix forward. fp16 K/V at rest (the default); states travel in their own
dtype. Median of --repeat runs, cold and warm interleaved; token agreement = the first generated
token is the same. Bytes per prefix are split into K/V and recurrent state.

  .venv/bin/python benchmarks/bench_hybrid_ttft.py [--lengths 256,1024,4096] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prefix_restore import free_port
from bench_rag import start_pion

from pion.client.hybrid_prefix import suffix_logits
from pion.client.prompt_cache import PionPromptCache
from pion.client.runtimes.transformers_runtime import forward_logits

SUFFIX_TOKENS = 8


def build(family: str) -> Any:
    import transformers

    torch.manual_seed(0)
    if family == "qwen3_next":
        config = transformers.Qwen3NextConfig(
            vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=8, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, linear_num_value_heads=4, linear_num_key_heads=2,
            linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=128,
            full_attention_interval=4, max_position_embeddings=16384)
    else:
        config = transformers.Mamba2Config(vocab_size=4096, hidden_size=256, num_hidden_layers=4, state_size=64,
                                           expand=2, n_groups=1, num_heads=8, head_dim=64, conv_kernel=4,
                                           chunk_size=64)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.pion_model_id = f"bench-random-{family}"
    return model


def measure(family: str, lengths: list[int], repeat: int, port: int) -> list[dict[str, Any]]:
    model = build(family)
    rows = []
    gen = torch.Generator().manual_seed(1)
    with PionPromptCache(model, port=port) as pc:
        for n in lengths:
            prefix = torch.randint(0, 4096, (n,), generator=gen).tolist()
            suffix = torch.randint(0, 4096, (SUFFIX_TOKENS,), generator=gen).tolist()
            pc.get_or_prefill(prefix)  # miss: prefill and store
            stored = pc.stats()["bytes_stored"]
            state_bytes = sum(len(b) for b in pc.hybrid.state_blobs(pc.get_or_prefill(prefix)).values()) \
                if pc.hybrid is not None else 0
            cold, warm, agree = [], [], 0
            for _ in range(repeat):
                t0 = time.perf_counter()
                cold_logits, _ = forward_logits(model, prefix + suffix, None)
                t1 = time.perf_counter()
                cache = pc.get_or_prefill(prefix)
                warm_logits = suffix_logits(model, cache, suffix)
                t2 = time.perf_counter()
                cold.append((t1 - t0) * 1e3)
                warm.append((t2 - t1) * 1e3)
                agree += int(cold_logits.argmax()) == int(warm_logits.argmax())
            rows.append({"family": family, "tokens": n, "cold_ms": statistics.median(cold),
                         "warm_ms": statistics.median(warm), "agree": agree, "repeat": repeat,
                         "state_bytes": state_bytes, "kv_bytes": stored - state_bytes})
            pc._stats.bytes_stored = 0
            print(f"{family} {n} done", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="256,1024,4096")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--families", default="qwen3_next,mamba2")
    args = parser.parse_args()
    torch.set_num_threads(1)
    lengths = [int(x) for x in args.lengths.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = start_pion(port, Path(tmp))
        try:
            rows = [r for family in args.families.split(",") for r in measure(family, lengths, args.repeat, port)]
        finally:
            server.terminate()
            server.wait(timeout=30)
    print("| model | prefix tokens | cold TTFT ms | warm TTFT ms | speedup | first-token agreement "
          "| K/V bytes | state bytes |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['family']} | {r['tokens']} | {r['cold_ms']:.1f} | {r['warm_ms']:.1f} "
              f"| {r['cold_ms'] / r['warm_ms']:.1f}x | {r['agree']}/{r['repeat']} | {r['kv_bytes']:,} "
              f"| {r['state_bytes']:,} |")


if __name__ == "__main__":
    main()
