"""Rewrite the golden vectors of the issue-20 formats in tests/golden/grouped/ (only on purpose).

The kivi formats share parameters across token groups of up to 128 rows, so their input must
span whole groups *and* a tail: ``kivi_input_136x64.f32`` is 136 rows x 64 values (for G = 32:
four groups + 8 tail rows; G = 64: two + 8; G = 128: one + 8), built from closed-form
expressions with two outlier channels. The per-head formats use ``per_head_input_4x128.f32``
(4 rows x 128 values, two heads of 64 / one of 128). For each format ``<fmt>.bin`` holds the
encoding and ``<fmt>.decoded.f32`` the decoded float32 values, little-endian;
``test_codec_golden_grouped.py`` compares both byte for byte.

Usage: .venv/bin/python tests/codecs/regen_golden_grouped.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pion.codecs import get_codec

GROUPED_DIR = Path(__file__).resolve().parent.parent / "golden" / "grouped"
KIVI_FORMATS = [f"kivi{b}g{g}" for b in (4, 5, 6, 7, 8) for g in (32, 64, 128)]
PER_HEAD_FORMATS = ["int8h64", "int8h128", "fp8h64", "fp8h128", "int6h64", "int6h128", "int5h64", "int5h128",
                    "int7h64", "int7h128", "int6h64r", "int5h64r", "int6h128r", "int5h128r", "int4h64"]
SINK_FORMATS = ["kivi6g128s", "kivi5g128s", "kivi7g128s", "int5h64s128", "int6h64s128", "int7h64s128",
                "int6h128s128", "int7h128s128", "int6h64rs128", "int5h64rs128", "kivi8g128s", "int4h64s128"]
GROUPED_FORMATS = KIVI_FORMATS + PER_HEAD_FORMATS + SINK_FORMATS
INPUTS = {"kivi": ("kivi_input_136x64.f32", 64), "per_head": ("per_head_input_4x128.f32", 128),
          "sink": ("sink_input_136x128.f32", 128)}


def kivi_input() -> np.ndarray:
    """136 tokens x 64 channels: smooth in both directions, channel 5 large, channel 17 offset."""
    t = np.arange(136, dtype=np.float64)[:, None]
    c = np.arange(64, dtype=np.float64)[None, :]
    x = 2.0 * np.sin(0.11 * t + 0.7 * c) + 0.05 * c
    x[:, 5] *= 30.0
    x[:, 17] += 12.5
    return x.astype("<f4")


def per_head_input() -> np.ndarray:
    """4 rows x 128: head 0 (values 0..63) small, head 1 large, one all-zero row, one wide row."""
    j = np.arange(128, dtype=np.float64)
    smooth = np.where(j < 64, 0.3, 40.0) * np.sin(0.29 * j)
    zeros = np.zeros(128)
    constant = np.full(128, -0.75)
    wide = np.where(j % 2 == 0, 1.0, -1.0) * 3.1 * 2.0 ** (j % 16 - 8)
    return np.stack([smooth, zeros, constant, wide]).astype("<f4")


def sink_input() -> np.ndarray:
    """136 x 128 for the first-row-in-fp16 formats (one 128-token group + 8 tail rows): the kivi
    input beside half of itself, with a row 0 unlike the others (an attention sink's K)."""
    x = np.concatenate([kivi_input(), 0.5 * kivi_input()], axis=1)
    x[0] = np.where(np.arange(128) % 3 == 0, -40.0, 7.25)
    return x.astype("<f4")


def input_for(name: str) -> tuple[str, np.ndarray]:
    """(input file name, rows) of a format."""
    if name in SINK_FORMATS:
        return INPUTS["sink"][0], sink_input()
    if name.startswith("kivi"):
        return INPUTS["kivi"][0], kivi_input()
    return INPUTS["per_head"][0], per_head_input()


def main() -> None:
    GROUPED_DIR.mkdir(parents=True, exist_ok=True)
    (GROUPED_DIR / INPUTS["kivi"][0]).write_bytes(kivi_input().tobytes())
    (GROUPED_DIR / INPUTS["per_head"][0]).write_bytes(per_head_input().tobytes())
    (GROUPED_DIR / INPUTS["sink"][0]).write_bytes(sink_input().tobytes())
    for name in GROUPED_FORMATS:
        _, rows = input_for(name)
        codec = get_codec(name)
        blob = codec.encode(rows)
        (GROUPED_DIR / f"{name}.bin").write_bytes(blob)
        decoded = codec.decode(blob, rows.shape[1], np.float32).astype("<f4")
        (GROUPED_DIR / f"{name}.decoded.f32").write_bytes(decoded.tobytes())
        print(f"{name}: {len(blob)} bytes")


if __name__ == "__main__":
    main()
