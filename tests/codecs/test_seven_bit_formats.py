"""The 7-bit per-head formats (issue 20, third round): the three-plane packing, int7h64/int7h128's
worked example and bound. (The generic checks -- NaN refusal, dtypes, partial blobs, dims -- run for
them in test_kivi_and_per_head_codecs.py; golden vectors in test_codec_golden_grouped.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from grouped_bounds import per_head_narrow_bound
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.codecs import get_codec
from pion.codecs.bitplanes import pack, plane_bytes, unpack


def test_the_7_bit_docstring_example_packs_to_the_documented_three_planes() -> None:
    codes = np.array([[5, 127, 16, 97, 64, 0, 0, 0]], dtype=np.uint8)
    assert pack(codes, 7).tobytes().hex(" ") == "f5 10 00 00 9c 00 1a"


def test_every_7_bit_code_in_every_position_survives_pack_and_unpack() -> None:
    codes = (np.arange(64 * 128).reshape(-1, 64) % 128).astype(np.uint8)
    codes = np.concatenate([codes, codes[:, ::-1], (codes * 37) % 128])
    packed = pack(codes, 7)
    assert packed.shape == (codes.shape[0], 56)
    assert unpack(packed, 64, 7).tolist() == codes.astype(np.float32).tolist()


def test_7_bit_planes_are_seven_bits_a_value() -> None:
    assert (plane_bytes(192, 7), plane_bytes(1024, 7)) == (168, 896)


def test_int7h64_worked_example_matches_the_docstring() -> None:
    x = np.zeros((1, 128), dtype=np.float32)
    x[0, :4] = [0.5, -1.0, 0.25, 0.0]
    x[0, 64] = 100.0
    codec = get_codec("int7h64")
    blob = codec.encode(x)
    assert len(blob) == 116
    assert (blob[:3].hex(" "), blob[32:34].hex(" "), blob[64:66].hex(" "), blob[80:82].hex(" "),
            blob[96:98].hex(" "), blob[104:106].hex(" "), blob[112:].hex(" ")) == (
        "10 00 00", "0f 00", "12 00", "03 00", "fd ff", "ff ff", "10 24 59 3e")
    decoded = codec.decode(blob, 128)
    assert [round(float(v), 6) for v in decoded[0, :4]] == [0.507812, -0.999756, 0.253906, 0.0]
    assert round(float(decoded[0, 64]), 6) == 99.975586


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), magnitude=st.sampled_from([1e-5, 1e-2, 1.0, 50.0, 2e3]),
       name=st.sampled_from(["int7h64", "int7h128"]), seed=st.integers(0, 2**16))
def test_int7_bound_holds_for_any_batch_and_magnitude(n: int, magnitude: float, name: str, seed: int) -> None:
    rows = (np.random.default_rng(seed).standard_normal((n, 256)) * magnitude).astype(np.float32)
    codec = get_codec(name)
    err = np.abs(codec.decode(codec.encode(rows), 256).astype(np.float64) - rows)
    assert (err <= per_head_narrow_bound(rows, int(name.split("h")[1]), 7)).all()


def test_a_heads_largest_value_is_kept_exactly_at_code_63() -> None:
    x = np.zeros((1, 64), dtype=np.float32)
    x[0, 0], x[0, 1] = 31.5, -31.5  # scale 0.5 exactly: codes +-63
    assert get_codec("int7h64").decode(get_codec("int7h64").encode(x), 64)[0, :2].tolist() == [31.5, -31.5]


@pytest.mark.parametrize("head_dim", [64, 128])
def test_7_bits_roughly_halve_6_bits_error_and_stay_above_8_bits(head_dim: int) -> None:
    rows = np.random.default_rng(5).standard_normal((64, 256)).astype(np.float32)
    err = {b: float(np.abs(get_codec(f"int{b}h{head_dim}").decode(get_codec(f"int{b}h{head_dim}").encode(rows), 256)
                           - rows).mean()) for b in (6, 7, 8)}
    assert err[8] < err[7] < 0.6 * err[6]
