"""The 5- and 6-bit formats of issue 20: the bit-plane packing, int6h*/int5h* and kivi5*/kivi6* specifics.

(The generic checks -- bounds, NaN refusal, dtypes, partial blobs, token groups -- run for these
formats in test_kivi_and_per_head_codecs.py; golden vectors in test_codec_golden_grouped.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
from grouped_bounds import kivi_bound, per_head_narrow_bound
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.codecs import get_codec
from pion.codecs.bitplanes import pack, plane_bytes, unpack


def test_the_bitplane_docstring_example_packs_to_the_documented_bytes() -> None:
    codes = np.array([[5, 63, 16, 33, 0, 0, 0, 0]], dtype=np.uint8)
    assert pack(codes, 6).tobytes().hex(" ") == "f5 10 00 00 9c 00"


@pytest.mark.parametrize("bits", [4, 5, 6, 7])
def test_every_code_value_in_every_position_survives_pack_and_unpack(bits: int) -> None:
    codes = (np.arange(64 * 2**bits).reshape(-1, 64) % 2**bits).astype(np.uint8)
    codes = np.concatenate([codes, codes[:, ::-1]])
    packed = pack(codes, bits)
    assert packed.shape == (codes.shape[0], plane_bytes(64, bits))
    assert unpack(packed, 64, bits).tolist() == codes.astype(np.float32).tolist()


@pytest.mark.parametrize("bits,expected", [(4, 96), (5, 120), (6, 144), (7, 168)])
def test_plane_bytes_are_b_bits_a_value(bits: int, expected: int) -> None:
    assert plane_bytes(192, bits) == expected


def test_int6h64_worked_example_matches_the_docstring() -> None:
    x = np.zeros((1, 128), dtype=np.float32)
    x[0, :4] = [0.5, -1.0, 0.25, 0.0]
    x[0, 64] = 100.0
    codec = get_codec("int6h64")
    blob = codec.encode(x)
    assert len(blob) == 100
    assert (blob[:3].hex(" "), blob[32:34].hex(" "), blob[64:66].hex(" "), blob[80:82].hex(" "),
            blob[96:].hex(" ")) == ("10 08 00", "0f 00", "a3 aa", "ab aa", "21 28 74 42")
    decoded = codec.decode(blob, 128)
    assert [round(float(v), 6) for v in decoded[0, :4]] == [0.516113, -0.999969, 0.258057, 0.0]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), magnitude=st.sampled_from([1e-5, 1e-2, 1.0, 50.0, 2e3]),
       name=st.sampled_from(["int6h64", "int6h128", "int5h64", "int5h128", "int4h64"]), seed=st.integers(0, 2**16))
def test_narrow_per_head_bound_holds_for_any_batch_and_magnitude(n: int, magnitude: float, name: str,
                                                                 seed: int) -> None:
    rows = (np.random.default_rng(seed).standard_normal((n, 256)) * magnitude).astype(np.float32)
    codec = get_codec(name)
    err = np.abs(codec.decode(codec.encode(rows), 256).astype(np.float64) - rows)
    assert (err <= per_head_narrow_bound(rows, int(name.split("h")[1]), int(name[3]))).all()


@pytest.mark.parametrize("name,top", [("int6h64", 31), ("int5h64", 15), ("int4h64", 7)])
def test_narrow_codes_are_symmetric_and_a_heads_largest_value_is_kept_exactly_when_fp16_can(name: str,
                                                                                          top: int) -> None:
    x = np.zeros((1, 64), dtype=np.float32)
    x[0, 0], x[0, 1] = top * 0.5, -top * 0.5  # scale 0.5 exactly: codes +-top
    assert get_codec(name).decode(get_codec(name).encode(x), 64)[0, :2].tolist() == [top * 0.5, -top * 0.5]


@pytest.mark.parametrize("name,bits", [("kivi6g64", 6), ("kivi5g32", 5)])
def test_narrow_kivi_per_channel_error_sits_between_the_4_and_8_bit_formats(name: str, bits: int) -> None:
    """More bits, smaller steps: on K-like rows (outlier channels) the 5/6-bit kivi error is below
    4-bit's and above 8-bit's at the same token group, and within its documented bound."""
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((128, 192)).astype(np.float32)
    rows[:, 3] = 40 + 2 * rows[:, 3]
    group = name.split("g")[1]
    err = {b: float(np.abs(get_codec(f"kivi{b}g{group}").decode(get_codec(f"kivi{b}g{group}").encode(rows), 192)
                           - rows).mean()) for b in (4, bits, 8)}
    assert err[8] < err[bits] < err[4]
    decoded = get_codec(name).decode(get_codec(name).encode(rows), 192)
    assert (np.abs(decoded.astype(np.float64) - rows) <= kivi_bound(rows, bits, int(group))).all()
