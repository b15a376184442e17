"""Numeric error of every storage format on Gaussian rows and on real SmolLM2 K/V.

Prints markdown tables for docs/formats.md:
  1. bytes/row at D = 192 and D = 1024 and the ratio vs fp16;
  2. per format, per data set: mean and max absolute error and row cosine
     (mean and worst row), for (a) N(0, 1) rows at D = 1024 and (b) the real
     K and V captured by benchmarks/capture_kv_fixture.py (SmolLM2-135M,
     5 layers x 1024 tokens x 192, post-RoPE K);
  3. the original design's claims about mlx4g32 (docs/design.md), checked on the same data with two
     comparison variants that exist only in this script: int4 affine with
     group 64 (``affine-g64``) and int4 symmetric with group 32 (``sym-g32``:
     scale = fp16(amax/7), codes in -8..7).

Usage: .venv/bin/python benchmarks/codec_fidelity.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pion.codecs import get_codec

FORMATS = ["fp16", "fp8", "int8", "mlx4g32", "turbo4", "turbo3", "turbo2"]
FIXTURE = Path(__file__).parent / "data" / "smollm2_kv_1k.npz"


def _fp16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).astype(np.float32)


def affine_int4(rows: np.ndarray, group: int) -> np.ndarray:
    """Round trip through int4 affine with ``group``-wide groups (mlx4g32's rule)."""
    g = rows.reshape(rows.shape[0], -1, group)
    lo, hi = g.min(axis=2, keepdims=True), g.max(axis=2, keepdims=True)
    scale, bias = _fp16((hi - lo) / 15), _fp16(lo)
    codes = np.clip(np.rint((g - bias) / np.where(scale > 0, scale, np.inf)), 0, 15)
    return (codes * scale + bias).reshape(rows.shape)


def symmetric_int4(rows: np.ndarray, group: int) -> np.ndarray:
    """Round trip through int4 symmetric (no bias) with ``group``-wide groups."""
    g = rows.reshape(rows.shape[0], -1, group)
    scale = _fp16(np.abs(g).max(axis=2, keepdims=True) / 7)
    codes = np.clip(np.rint(g / np.where(scale > 0, scale, np.inf)), -8, 7)
    return (codes * scale).reshape(rows.shape)


def codec_round_trip(name: str, rows: np.ndarray) -> np.ndarray:
    codec = get_codec(name)
    return codec.decode(codec.encode(rows), rows.shape[1])


def errors(rows: np.ndarray, decoded: np.ndarray) -> tuple[float, float, float, float]:
    """(mean abs error, max abs error, mean row cosine, worst row cosine)."""
    x, y = rows.astype(np.float64), decoded.astype(np.float64)
    err = np.abs(x - y)
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    cos = np.einsum("ij,ij->i", x, y) / np.where(norms > 0, norms, 1.0)
    return float(err.mean()), float(err.max()), float(cos.mean()), float(cos.min())


def datasets() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    sets = {"Gaussian N(0,1), D=1024": rng.standard_normal((2048, 1024), dtype=np.float32)}
    if FIXTURE.exists():
        data = np.load(FIXTURE)
        layers = data["layers"].tolist()
        sets[f"SmolLM2 K (layers {layers})"] = data["k"].astype(np.float32).reshape(-1, data["k"].shape[-1])
        sets[f"SmolLM2 V (layers {layers})"] = data["v"].astype(np.float32).reshape(-1, data["v"].shape[-1])
    else:
        print(f"(no {FIXTURE}: run benchmarks/capture_kv_fixture.py for the real K/V rows)")
    return sets


def print_sizes() -> None:
    print("| format | bytes/row D=192 | bytes/row D=1024 | vs fp16 (D=192) | vs fp16 (D=1024) |")
    print("|---|---:|---:|---:|---:|")
    for name in FORMATS:
        codec = get_codec(name)
        b192, b1024 = codec.row_bytes(192), codec.row_bytes(1024)
        print(f"| {name} | {b192} | {b1024} | {384 / b192:.2f}x | {2048 / b1024:.2f}x |")


def print_errors(sets: dict[str, np.ndarray]) -> None:
    for title, rows in sets.items():
        print(f"\n**{title}** ({rows.shape[0]} rows, mean |x| {np.abs(rows).mean():.3f}, "
              f"max |x| {np.abs(rows).max():.2f})\n")
        print("| format | mean abs err | max abs err | mean cosine | worst-row cosine |")
        print("|---|---:|---:|---:|---:|")
        for name in FORMATS:
            mean, worst, cos, cos_min = errors(rows, codec_round_trip(name, rows))
            print(f"| {name} | {mean:.5f} | {worst:.4f} | {cos:.6f} | {cos_min:.6f} |")


def print_claims(sets: dict[str, np.ndarray]) -> None:
    variants = {
        "mlx4g32 (affine, g32)": lambda r: codec_round_trip("mlx4g32", r),
        "affine-g64": lambda r: affine_int4(r, 64),
        "sym-g32": lambda r: symmetric_int4(r, 32),
        "turbo4": lambda r: codec_round_trip("turbo4", r),
    }
    names = list(sets)
    print("\n| variant | " + " | ".join(f"{n}: mean abs / cosine" for n in names) + " |")
    print("|---|" + "---:|" * len(names))
    table: dict[str, list[tuple[float, float, float, float]]] = {}
    for label, run in variants.items():
        table[label] = [errors(rows, run(rows)) for rows in sets.values()]
        cells = " | ".join(f"{e[0]:.5f} / {e[2]:.6f}" for e in table[label])
        print(f"| {label} | {cells} |")
    print()
    for i, name in enumerate(names):
        g32, g64 = table["mlx4g32 (affine, g32)"][i][0], table["affine-g64"][i][0]
        sym, turbo = table["sym-g32"][i][0], table["turbo4"][i][0]
        print(f"- {name}: g32 vs g64 mean abs {g32:.5f} vs {g64:.5f} ({(1 - g32 / g64) * 100:+.1f}% less error); "
              f"affine vs symmetric {g32:.5f} vs {sym:.5f} ({(1 - g32 / sym) * 100:+.1f}%); "
              f"mlx4g32 vs turbo4 {g32:.5f} vs {turbo:.5f} ({(1 - g32 / turbo) * 100:+.1f}%)")


def main() -> None:
    sets = datasets()
    print_sizes()
    print_errors(sets)
    print_claims(sets)


if __name__ == "__main__":
    main()
