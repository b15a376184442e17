"""Rewrite the codec golden vectors in tests/golden/ (run only when a format changes on purpose).

The input is a fixed 4 x 64 float32 matrix (a mixed-sign smooth row, an all-zero
row, a constant row and a row spanning 2^-8..2^7), stored as
``codec_input_4x64.f32``; for every registered format ``<fmt>.bin`` holds its
encoding and ``<fmt>.decoded.f32`` the decoded float32 values, all little-endian.
``test_codec_golden.py`` compares both byte for byte, so any change to a
format's bytes or its decoder fails until this script is rerun and the diff reviewed.

Usage: .venv/bin/python tests/codecs/regen_golden.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pion.codecs import get_codec

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"
INPUT_NAME = "codec_input_4x64.f32"
KV_DIM = 64
# The spec's formats; the issue-20 formats have their own vectors (regen_golden_grouped.py).
SPEC_FORMATS = ["fp32", "fp16", "int8", "fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"]


def golden_input() -> np.ndarray:
    """The fixed input rows, built from closed-form expressions."""
    j = np.arange(KV_DIM, dtype=np.float64)
    smooth = 3.0 * np.sin(0.37 * j) + 0.1 * j / KV_DIM
    zeros = np.zeros(KV_DIM)
    constant = np.full(KV_DIM, 0.5)
    wide = np.where(j % 2 == 0, 1.0, -1.0) * 7.3 * 2.0 ** (j % 16 - 8)
    return np.stack([smooth, zeros, constant, wide]).astype("<f4")


def main() -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    rows = golden_input()
    (GOLDEN_DIR / INPUT_NAME).write_bytes(rows.tobytes())
    for name in SPEC_FORMATS:
        codec = get_codec(name)
        blob = codec.encode(rows)
        (GOLDEN_DIR / f"{name}.bin").write_bytes(blob)
        decoded = codec.decode(blob, KV_DIM, np.float32).astype("<f4")
        (GOLDEN_DIR / f"{name}.decoded.f32").write_bytes(decoded.tobytes())
        print(f"{name}: {len(blob)} bytes")


if __name__ == "__main__":
    main()
