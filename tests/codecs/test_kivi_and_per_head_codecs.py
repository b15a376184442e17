"""The issue-20 formats: kivi K per channel over token groups, and int8/fp8/int6/int5 with per-head scales."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from grouped_bounds import kivi_bound, per_head_fp8_bound, per_head_int8_bound, per_head_narrow_bound
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.codecs import codec_names, get_codec
from pion.codecs.base import token_group
from pion.common.errors import CodecError

KIVI = [f"kivi{b}g{g}" for b in (4, 5, 6, 7, 8) for g in (32, 64, 128)]
PER_HEAD = ["int8h64", "int8h128", "fp8h64", "fp8h128"]
NARROW = ["int6h64", "int6h128", "int5h64", "int5h128", "int7h64", "int7h128", "int4h64"]  # 4-7 bits per head
SINK = ["kivi6g128s", "kivi5g128s", "kivi7g128s", "int5h64s128", "int6h64s128", "int7h64s128", "int6h128s128",
        "int7h128s128", "int6h64rs128", "int5h64rs128", "kivi8g128s", "int4h64s128"]
ROTATED = ["int6h64r", "int5h64r", "int6h128r", "int5h128r"]  # Hadamard-rotated heads  # first rows fp16
NEW = KIVI + PER_HEAD + NARROW + SINK + ROTATED
REAL_KV = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "smollm2_kv_1k.npz"


def bits_and_group(name: str) -> tuple[int, int]:
    bits, group = name.removeprefix("kivi").split("g")
    return int(bits), int(group)


def outlier_rows(n: int, kv_dim: int, seed: int = 0) -> np.ndarray:
    """Gaussian rows where channel 3 is 40x larger and channel 9 sits at +25 (K's outlier channels)."""
    x = np.random.default_rng(seed).standard_normal((n, kv_dim)).astype(np.float32)
    x[:, 3] *= 40
    x[:, 9] += 25
    return x


def relative_rows(name: str, blob: bytes, n: int, kv_dim: int) -> np.ndarray:
    """Which tail rows are stored relative to the group before them (sign bit of their first scale)."""
    codec = get_codec(name)
    group = bits_and_group(name)[1]
    raw = np.frombuffer(blob, dtype=np.uint8).reshape(n, codec.row_bytes(kv_dim))
    first_scale = raw[n - n % group:, kv_dim * bits_and_group(name)[0] // 8:][:, :2].copy().view("<u2")[:, 0]
    return (first_scale & 0x8000) != 0


def checked_roundtrip(name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|x - x_hat|, the documented bound for this blob)."""
    blob = get_codec(name).encode(rows)
    err = np.abs(get_codec(name).decode(blob, rows.shape[1]).astype(np.float64) - rows)
    bound = kivi_bound(rows, *bits_and_group(name), relative_rows(name, blob, *rows.shape))
    return err, bound


def k_like_rows(n: int, kv_dim: int, seed: int = 0) -> np.ndarray:
    """Rows like real K: outlier channels that keep their size from token to token (3 near +40,
    9 near -25), the others Gaussian."""
    x = np.random.default_rng(seed).standard_normal((n, kv_dim)).astype(np.float32)
    x[:, 3] = 40 + 2 * x[:, 3]
    x[:, 9] -= 25
    return x


def roundtrip(name: str, rows: np.ndarray) -> np.ndarray:
    codec = get_codec(name)
    blob = codec.encode(rows)
    assert len(blob) == rows.shape[0] * codec.row_bytes(rows.shape[1])
    return codec.decode(blob, rows.shape[1])


def test_every_new_format_is_registered() -> None:
    assert set(NEW) <= set(codec_names())


@pytest.mark.parametrize("name,bytes_192,bytes_1024", [
    ("kivi4g32", 120, 640), ("kivi4g64", 108, 576), ("kivi4g128", 102, 544),
    ("kivi8g32", 216, 1152), ("kivi8g64", 204, 1088), ("kivi8g128", 198, 1056),
    ("int8h64", 198, 1056), ("fp8h64", 198, 1056), ("int8h128", None, 1040), ("fp8h128", None, 1040),
    ("kivi5g32", 144, 768), ("kivi5g64", 132, 704), ("kivi5g128", 126, 672),
    ("kivi6g32", 168, 896), ("kivi6g64", 156, 832), ("kivi6g128", 150, 800),
    ("int6h64", 150, 800), ("int6h128", None, 784), ("int5h64", 126, 672), ("int5h128", None, 656),
    ("int7h64", 174, 928), ("int7h128", None, 912),
    ("kivi6g128s", 153, 816), ("kivi5g128s", 129, 688), ("kivi7g128s", 177, 944), ("int5h64s128", 129, 688),
    ("kivi7g32", 192, 1024), ("kivi7g64", 180, 960), ("kivi7g128", 174, 928),
    ("int6h64s128", 153, 816), ("int7h64s128", 177, 944),
    ("int6h128s128", None, 800), ("int7h128s128", None, 928),
    ("int6h64r", 150, 800), ("int5h64r", 126, 672), ("int6h128r", None, 784), ("int5h128r", None, 656),
    ("int6h64rs128", 153, 816), ("int5h64rs128", 129, 688),
    ("int4h64", 102, 544), ("kivi8g128s", 201, 1072), ("int4h64s128", 105, 560),
])
def test_row_sizes_are_the_documented_ones(name: str, bytes_192: int | None, bytes_1024: int) -> None:
    codec = get_codec(name)
    assert codec.row_bytes(1024) == bytes_1024
    if bytes_192 is not None:
        assert codec.row_bytes(192) == bytes_192


@pytest.mark.parametrize("name,dim,multiple", [
    ("kivi4g32", 48, 32), ("kivi8g64", 80, 32), ("kivi4g128", 96, 64), ("int8h64", 96, 64),
    ("fp8h128", 192, 128), ("kivi6g128", 96, 64), ("kivi5g32", 80, 32), ("int6h64", 96, 64), ("int5h128", 192, 128),
    ("int7h64", 96, 64), ("int7h128", 192, 128), ("kivi6g128s", 96, 64), ("int6h64s128", 32, 64),
    ("int7h128s128", 192, 128),
])
def test_a_kv_dim_that_does_not_fit_the_groups_is_refused_by_name(name: str, dim: int, multiple: int) -> None:
    with pytest.raises(CodecError) as info:
        get_codec(name).check_dim(dim)
    assert str(info.value) == f"kv_dim must be a multiple of {multiple} for {name}"


@pytest.mark.parametrize("name", KIVI)
def test_kivi_token_group_is_the_one_in_its_name(name: str) -> None:
    assert token_group(get_codec(name)) == bits_and_group(name)[1]
    assert token_group(get_codec("int8h64")) == 1


@pytest.mark.parametrize("name", KIVI)
@pytest.mark.parametrize("n", [1, 31, 32, 64, 100, 128, 300])
def test_kivi_round_trip_stays_within_the_documented_bound(name: str, n: int) -> None:
    rows = (outlier_rows if n % 2 else k_like_rows)(n, 192, seed=n)
    err, bound = checked_roundtrip(name, rows)
    assert (err <= bound).all()


def per_head_bound(name: str, rows: np.ndarray) -> np.ndarray:
    head_dim = int(name.split("h")[1])
    if name.startswith("int8"):
        return per_head_int8_bound(rows, head_dim)
    if name.startswith("fp8"):
        return per_head_fp8_bound(rows, head_dim)
    return per_head_narrow_bound(rows, head_dim, bits=int(name[3]))


@pytest.mark.parametrize("name", PER_HEAD + NARROW)
def test_per_head_round_trip_stays_within_the_documented_bound(name: str) -> None:
    rows = np.concatenate([outlier_rows(100, 256), outlier_rows(20, 256, seed=1) * 300])
    bound = per_head_bound(name, rows)
    err = np.abs(roundtrip(name, rows).astype(np.float64) - rows)
    assert (err <= bound).all()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 140), magnitude=st.sampled_from([1e-5, 1e-2, 1.0, 50.0, 2e3]),
       name=st.sampled_from(KIVI), seed=st.integers(0, 2**16))
def test_kivi_bound_holds_for_any_batch_size_and_magnitude(n: int, magnitude: float, name: str, seed: int) -> None:
    rows = (np.random.default_rng(seed).standard_normal((n, 128)) * magnitude).astype(np.float32)
    err, bound = checked_roundtrip(name, rows)
    assert (err <= bound).all()


def test_kivi4g32_worked_example_matches_the_docstring() -> None:
    x = np.tile(np.arange(32, dtype=np.float32)[:, None] / 8, (1, 32))
    x[:, 0] += 100
    codec = get_codec("kivi4g32")
    blob = codec.encode(x)
    row = codec.row_bytes(32)
    assert row == 20
    assert blob[5 * row:6 * row].hex(" ") == "22 " * 16 + "22 34 22 34"
    assert blob[16 * row + 16:17 * row].hex(" ") == "40 56 00 00"
    decoded = codec.decode(blob, 32)
    assert [round(float(v), 4) for v in decoded[5, :2]] == [100.5166, 0.5166]


def test_int8h64_worked_example_matches_the_docstring() -> None:
    x = np.zeros((1, 128), dtype=np.float32)
    x[0, :4] = [0.5, -1.0, 0.25, 0.0]
    x[0, 64] = 100.0
    blob = get_codec("int8h64").encode(x)
    assert (blob[:4].hex(" "), blob[64:66].hex(" "), blob[128:].hex(" ")) == ("40 81 20 00", "7f 00", "08 20 4d 3a")
    decoded = get_codec("int8h64").decode(blob, 128)
    assert decoded[0, :4].tolist() == [0.50390625, -0.99993896484375, 0.251953125, 0.0]
    assert get_codec("int8").decode(get_codec("int8").encode(x), 128)[0, :2].tolist() == [0.78759765625,
                                                                                      -0.78759765625]


@pytest.mark.parametrize("name", KIVI)
def test_a_tail_without_full_groups_is_plain_and_decodes_on_its_own(name: str) -> None:
    group = bits_and_group(name)[1]
    rows = outlier_rows(group - 1, 128)
    codec = get_codec(name)
    blob = codec.encode(rows)
    assert relative_rows(name, blob, group - 1, 128).tolist() == [False] * (group - 1)
    per_row = b"".join(codec.encode(rows[i:i + 1]) for i in range(group - 1))
    assert blob == per_row  # plain tail rows are each encoded on their own


@pytest.mark.parametrize("name", KIVI)
def test_tail_rows_after_a_group_are_stored_relative_to_it_and_keep_outlier_channels_accurate(name: str) -> None:
    group = bits_and_group(name)[1]
    rows = k_like_rows(group + 20, 128, seed=7)
    codec = get_codec(name)
    blob = codec.encode(rows)
    relative = relative_rows(name, blob, group + 20, 128)
    assert int(relative.sum()) >= 15
    tail_err = np.abs(codec.decode(blob, 128)[group:] - rows[group:]).max(axis=1)
    plain_err = np.abs(codec.decode(codec.encode(rows[group:]), 128) - rows[group:]).max(axis=1)
    assert (tail_err <= plain_err).all()  # each row took the better of the two
    assert float(tail_err.mean()) < 0.8 * float(plain_err.mean())
    with pytest.raises(CodecError) as info:
        codec.decode(blob[group * codec.row_bytes(128):], 128)
    assert str(info.value) == (f"{name}: the tail rows of this blob are relative to the token group before them; "
                               "decode from a group boundary before the tail")


@pytest.mark.parametrize("name", KIVI)
def test_full_groups_are_encoded_each_on_their_own(name: str) -> None:
    group = bits_and_group(name)[1]
    rows = outlier_rows(2 * group, 128, seed=4)
    codec = get_codec(name)
    assert codec.encode(rows) == codec.encode(rows[:group]) + codec.encode(rows[group:])


@pytest.mark.parametrize("name", NEW)
def test_zero_rows_decode_to_exact_zeros_and_an_empty_batch_is_empty(name: str) -> None:
    rows = np.zeros((130, 128), dtype=np.float32)
    assert roundtrip(name, rows).tolist() == rows.tolist()
    assert get_codec(name).encode(rows[:0]) == b""
    assert get_codec(name).decode(b"", 128).shape == (0, 128)


@pytest.mark.parametrize("name", NEW)
def test_decode_returns_the_requested_dtype(name: str) -> None:
    codec = get_codec(name)
    blob = codec.encode(outlier_rows(70, 128))
    as32, as16 = codec.decode(blob, 128), codec.decode(blob, 128, np.float16)
    assert (as32.dtype, as16.dtype, as16.shape) == (np.float32, np.float16, (70, 128))
    assert as16.tolist() == as32.astype(np.float16).tolist()


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_are_refused_naming_the_row(name: str, bad: float) -> None:
    rows = outlier_rows(70, 128)
    rows[66, 40] = bad
    with pytest.raises(CodecError) as info:
        get_codec(name).encode(rows)
    assert str(info.value) == f"{name} cannot store NaN or Inf (found in row 66); nothing was stored"


@pytest.mark.parametrize("name", NEW)
def test_a_blob_that_is_not_whole_rows_is_refused(name: str) -> None:
    codec = get_codec(name)
    with pytest.raises(CodecError, match="not a whole number of"):
        codec.decode(codec.encode(outlier_rows(3, 128))[:-1], 128)


@pytest.mark.parametrize("name,value", [("kivi4g32", 7e5), ("kivi8g64", 1e7), ("int8h64", 1e7), ("fp8h64", 4e7),
                                        ("kivi6g64", 3e6), ("int6h64", 3e6), ("int5h128", 1.5e6)])
def test_values_whose_parameters_overflow_fp16_are_refused(name: str, value: float) -> None:
    rows = outlier_rows(40, 128)
    rows[:, 0] = value
    rows[::2, 0] = -value
    with pytest.raises(CodecError, match=f"values too large for {name}"):
        get_codec(name).encode(rows)


@pytest.mark.skipif(not REAL_KV.exists(), reason="benchmarks/data/smollm2_kv_1k.npz not present")
def test_per_channel_k_has_less_error_than_per_row_k_at_the_same_bytes_on_smollm2() -> None:
    """The reason for kivi: on real K (outlier channels), per-channel 4-bit beats per-token 4-bit."""
    k = np.load(REAL_KV)["k"][1].astype(np.float32)
    err = {name: float(np.abs(roundtrip(name, k) - k).mean()) for name in ("mlx4g32", "kivi4g32", "int8", "kivi8g64")}
    assert get_codec("kivi4g32").row_bytes(192) == get_codec("mlx4g32").row_bytes(192)
    assert err["kivi4g32"] < 0.6 * err["mlx4g32"]
    assert err["kivi8g64"] < 0.5 * err["int8"]


def test_kivi4g32_relative_tail_worked_example_matches_the_docs() -> None:
    x = np.tile(np.arange(33, dtype=np.float32)[:, None] / 8, (1, 32))
    x[:, 0] += 100
    codec = get_codec("kivi4g32")
    blob = codec.encode(x)
    assert blob[32 * 20:].hex(" ") == "ff " * 16 + "de b0 de 30"
    assert [round(float(v), 5) for v in codec.decode(blob, 32)[32, :2]] == [103.99985, 3.99985]


def test_kivi4g32_plain_tail_worked_example_matches_the_docs() -> None:
    x = np.zeros((1, 64), dtype=np.float32)
    x[0, :4] = [0.5, -1.0, 0.25, 0.0]
    x[0, 32] = 3.0
    blob = get_codec("kivi4g32").encode(x)
    assert blob.hex(" ") == ("1c 8a " + "88 " * 14 + "8f " + "88 " * 15 + "92 30 00 00 db 36 00 00").strip()
    assert round(float(get_codec("kivi4g32").decode(blob, 64)[0, 0]), 6) == 0.571289
