"""Golden vectors of the issue-20 formats (kivi*, int8h*, fp8h*), in tests/golden/grouped/.

A failure means a format's bytes changed: if intended, rerun
``.venv/bin/python tests/codecs/regen_golden_grouped.py``, review the diff and update docs/formats.md.
"""

from __future__ import annotations

import numpy as np
import pytest
from regen_golden_grouped import GROUPED_DIR, GROUPED_FORMATS, input_for

from pion.codecs import get_codec


def stored_input(name: str) -> np.ndarray:
    file_name, rows = input_for(name)
    return np.frombuffer((GROUPED_DIR / file_name).read_bytes(), dtype="<f4").reshape(rows.shape)


def test_every_grouped_format_has_a_golden_vector() -> None:
    assert sorted(p.name for p in GROUPED_DIR.glob("*.bin")) == sorted(f"{f}.bin" for f in GROUPED_FORMATS)


@pytest.mark.parametrize("name", ["kivi4g32", "int8h64"])
def test_the_stored_inputs_are_the_documented_ones(name: str) -> None:
    assert stored_input(name).tobytes() == input_for(name)[1].tobytes()


@pytest.mark.parametrize("name", GROUPED_FORMATS)
def test_encoding_the_golden_input_gives_the_checked_in_bytes(name: str) -> None:
    assert get_codec(name).encode(stored_input(name)) == (GROUPED_DIR / f"{name}.bin").read_bytes()


# Hadamard-rotated formats decode through float matrix products, whose last bit depends on the BLAS kernel
ROTATED = [name for name in GROUPED_FORMATS if name.endswith(("r", "rs128"))]


@pytest.mark.parametrize("name", [name for name in GROUPED_FORMATS if name not in ROTATED])
def test_decoding_the_golden_bytes_gives_the_checked_in_floats_exactly(name: str) -> None:
    kv_dim = stored_input(name).shape[1]
    decoded = get_codec(name).decode((GROUPED_DIR / f"{name}.bin").read_bytes(), kv_dim)
    assert decoded.astype("<f4").tobytes() == (GROUPED_DIR / f"{name}.decoded.f32").read_bytes()


@pytest.mark.parametrize("name", ROTATED)
def test_decoding_the_golden_bytes_of_a_rotated_format_gives_the_checked_in_floats_to_float32_rounding(
        name: str) -> None:
    kv_dim = stored_input(name).shape[1]
    decoded = get_codec(name).decode((GROUPED_DIR / f"{name}.bin").read_bytes(), kv_dim)
    golden = np.frombuffer((GROUPED_DIR / f"{name}.decoded.f32").read_bytes(), dtype="<f4").reshape(decoded.shape)
    assert len(ROTATED) == 6
    assert float(np.abs(decoded - golden).max()) <= 1e-5 * float(np.abs(golden).max())
