"""Golden vectors: a fixed input's encoded bytes per format are checked into tests/golden/.

A failure here means a format's bytes changed. If that was intended, rerun
``.venv/bin/python tests/codecs/regen_golden.py``, review the diff, and update
docs/formats.md and the format's version wherever it is persisted.
"""

from __future__ import annotations

import numpy as np
import pytest
from regen_golden import GOLDEN_DIR, INPUT_NAME, KV_DIM, SPEC_FORMATS, golden_input
from regen_golden_grouped import GROUPED_FORMATS

from pion.codecs import codec_names, get_codec

FORMATS = SPEC_FORMATS


def stored_input() -> np.ndarray:
    return np.frombuffer((GOLDEN_DIR / INPUT_NAME).read_bytes(), dtype="<f4").reshape(-1, KV_DIM)


def test_every_registered_format_has_a_golden_vector() -> None:
    assert sorted(FORMATS + GROUPED_FORMATS) == codec_names()  # the rest: test_codec_golden_grouped.py
    assert sorted(p.name for p in GOLDEN_DIR.glob("*.bin")) == sorted(f"{f}.bin" for f in FORMATS)


def test_the_stored_golden_input_is_the_documented_one() -> None:
    assert stored_input().tobytes() == golden_input().tobytes()


@pytest.mark.parametrize("name", FORMATS)
def test_encoding_the_golden_input_gives_the_checked_in_bytes(name: str) -> None:
    assert get_codec(name).encode(stored_input()) == (GOLDEN_DIR / f"{name}.bin").read_bytes()


@pytest.mark.parametrize("name", [f for f in FORMATS if not f.startswith("turbo")])
def test_decoding_the_golden_bytes_gives_the_checked_in_floats_exactly(name: str) -> None:
    decoded = get_codec(name).decode((GOLDEN_DIR / f"{name}.bin").read_bytes(), KV_DIM)
    assert decoded.astype("<f4").tobytes() == (GOLDEN_DIR / f"{name}.decoded.f32").read_bytes()


@pytest.mark.parametrize("name", ["turbo4", "turbo3", "turbo2"])
def test_decoding_turbo_golden_bytes_matches_to_float32_rounding(name: str) -> None:
    # The inverse rotation is a BLAS GEMM, whose summation order varies by CPU.
    decoded = get_codec(name).decode((GOLDEN_DIR / f"{name}.bin").read_bytes(), KV_DIM)
    expected = np.frombuffer((GOLDEN_DIR / f"{name}.decoded.f32").read_bytes(), dtype="<f4").reshape(-1, KV_DIM)
    np.testing.assert_allclose(decoded, expected, rtol=0, atol=1e-5 * float(np.abs(expected).max()))
