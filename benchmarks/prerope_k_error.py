"""How much numeric error would K per channel save if it were quantized before RoPE (issue 20)?

KVQuant quantizes K per channel *before* the rotary embedding: RoPE mixes each pair of channels
(i, i + head_dim/2) by a position-dependent angle, so a channel's range over a token group is
wider after it. Pion stores post-RoPE K (what transformers' cache receives), so this measures the
gain offline instead of building it: on the real SmolLM2-135M K of the "Numeric fidelity" fixture
(post-RoPE, positions 0..1023), un-rotate K to pre-RoPE exactly, encode and decode it, rotate the
result back, and compare the mean |error| in post-RoPE space (what attention sees) with encoding
post-RoPE K directly at the same bytes.

    .venv/bin/python benchmarks/prerope_k_error.py [--rope-theta 100000] [--formats kivi4g32 ...]

(--rope-theta: SmolLM2-135M's ``rope_parameters.rope_theta``, default RoPE; head_dim 64, 3 KV heads.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from pion.codecs import get_codec

FIXTURE = Path(__file__).parent / "data" / "smollm2_kv_1k.npz"
HEAD_DIM = 64


def rotate(x: np.ndarray, theta: float, sign: float) -> np.ndarray:
    """Llama-style RoPE (rotate_half pairs i, i + D/2) of rows [n, H*D] at positions 0..n-1;
    ``sign`` +1 applies it, -1 removes it."""
    n, dim = x.shape
    inv = theta ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angle = np.arange(n)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(angle)] * 2, 1)[:, None]
    sin = np.concatenate([np.sin(angle)] * 2, 1)[:, None]
    heads = x.reshape(n, dim // HEAD_DIM, HEAD_DIM).astype(np.float64)
    half = np.concatenate([-heads[..., HEAD_DIM // 2:], heads[..., :HEAD_DIM // 2]], -1)
    return (heads * cos + sign * half * sin).reshape(n, dim).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rope-theta", type=float, default=100000.0)
    parser.add_argument("--formats", nargs="+", default=["kivi4g32", "kivi4g128", "kivi5g64", "kivi6g128", "int6h64"])
    args = parser.parse_args()
    data = np.load(FIXTURE)
    keys = data["k"].astype(np.float32)
    print(f"SmolLM2-135M K, layers {data['layers'].tolist()}, {keys.shape[1]} tokens; mean |error| in post-RoPE space")
    print("| format | K post-RoPE (stored today) | K pre-RoPE, re-rotated | change |")
    print("|---|---:|---:|---:|")
    for fmt in args.formats:
        codec = get_codec(fmt)
        post, pre = [], []
        for k in keys:
            post.append(float(np.abs(codec.decode(codec.encode(k), k.shape[1]) - k).mean()))
            unrotated = rotate(k, args.rope_theta, -1.0)
            back = rotate(codec.decode(codec.encode(unrotated), k.shape[1]), args.rope_theta, 1.0)
            pre.append(float(np.abs(back - k).mean()))
        a, b = float(np.mean(post)), float(np.mean(pre))
        print(f"| {fmt} | {a:.4f} | {b:.4f} | {100 * (b / a - 1):+.0f}% |")


if __name__ == "__main__":
    main()
