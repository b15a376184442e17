"""Round trips through every format, against the error bound its documentation states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from codec_bounds import fp8_bound, int8_bound, mlx4g32_bound
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pion.codecs import get_codec
from pion.codecs.turbo import codebook, rotation_matrix
from pion.common.errors import CodecError

QUANTIZED = ["int8", "fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"]
GROUPED = ["fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"]
ALL = ["fp32", "fp16", *QUANTIZED]
BOUNDS = {"int8": int8_bound, "fp8": fp8_bound, "mlx4g32": mlx4g32_bound}
LLOYD_MAX_MSE = {4: 0.009501, 3: 0.034548, 2: 0.117482}
# real post-RoPE K and V of SmolLM2-135M (benchmarks/capture_kv_fixture.py)
REAL_KV = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "smollm2_kv_1k.npz"


def gaussian_rows(n: int, kv_dim: int, seed: int = 0, sigma: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, kv_dim)) * sigma).astype(np.float32)


def roundtrip(name: str, rows: np.ndarray) -> np.ndarray:
    codec = get_codec(name)
    blob = codec.encode(rows)
    assert len(blob) == rows.shape[0] * codec.row_bytes(rows.shape[1])
    return codec.decode(blob, rows.shape[1])


def assert_turbo_codes_are_nearest_levels(rows: np.ndarray, decoded: np.ndarray, bits: int) -> None:
    """In the rotated frame every decoded coordinate is rms * (the level nearest y / rms)."""
    m = rotation_matrix().astype(np.float64)
    groups = rows.reshape(-1, 32).astype(np.float64)
    rms = np.sqrt((groups**2).mean(axis=1)).astype(np.float32).astype(np.float16).astype(np.float64)
    z = groups @ m.T
    z_hat = decoded.reshape(-1, 32).astype(np.float64) @ m.T
    zero = rms == 0
    assert np.abs(z_hat[zero]).max(initial=0.0) == 0.0
    z, z_hat, rms = z[~zero] / rms[~zero, None], z_hat[~zero] / rms[~zero, None], rms[~zero]
    levels = codebook(bits).astype(np.float64)
    chosen = np.abs(z_hat[..., None] - levels).argmin(axis=-1)
    np.testing.assert_allclose(z_hat, levels[chosen], atol=1e-4)
    best = np.abs(z[..., None] - levels).min(axis=-1)
    assert (np.abs(z - levels[chosen]) <= best + 1e-4).all()


def test_fp32_round_trip_is_bit_exact() -> None:
    rows = gaussian_rows(7, 33)
    rows[0, 0] = np.float32(1e-40)  # a subnormal survives too
    assert roundtrip("fp32", rows).tobytes() == rows.tobytes()


def test_fp16_round_trip_equals_numpy_half_conversion_and_saturates() -> None:
    rows = gaussian_rows(5, 20, sigma=100.0)
    rows[1, :4] = [70000.0, -1e9, 65519.0, 65520.0]
    decoded = roundtrip("fp16", rows)
    expected = np.clip(rows, -65504, 65504).astype(np.float16).astype(np.float32)
    assert decoded.tobytes() == expected.tobytes()
    assert decoded[1, :4].tolist() == [65504.0, -65504.0, 65504.0, 65504.0]


@pytest.mark.parametrize("name", ["int8", "fp8", "mlx4g32"])
def test_quantized_round_trip_stays_within_documented_bound(name: str) -> None:
    rows = np.concatenate([gaussian_rows(200, 192), gaussian_rows(56, 192, seed=1, sigma=37.0)])
    decoded = roundtrip(name, rows)
    err = np.abs(decoded.astype(np.float64) - rows)
    assert (err <= BOUNDS[name](rows)).all()


@pytest.mark.parametrize("name,bits", [("turbo4", 4), ("turbo3", 3), ("turbo2", 2)])
def test_turbo_picks_the_nearest_level_for_every_rotated_coordinate(name: str, bits: int) -> None:
    rows = np.concatenate([gaussian_rows(64, 192), gaussian_rows(8, 192, seed=3, sigma=1e3)])
    assert_turbo_codes_are_nearest_levels(rows, roundtrip(name, rows), bits)


@pytest.mark.parametrize("name,bits", [("turbo4", 4), ("turbo3", 3), ("turbo2", 2)])
def test_turbo_error_on_gaussian_rows_is_close_to_lloyd_max_distortion(name: str, bits: int) -> None:
    rows = gaussian_rows(2048, 192, seed=2)
    decoded = roundtrip(name, rows)
    relative_mse = float(((decoded - rows) ** 2).mean() / (rows**2).mean())
    # A group's rotated coordinates are never beyond sqrt(32) rms, so slightly below theory.
    assert LLOYD_MAX_MSE[bits] * 0.85 <= relative_mse <= LLOYD_MAX_MSE[bits] * 1.05


def test_turbo_round_trip_of_the_worked_example_matches_the_docstring() -> None:
    rows = np.zeros((1, 32), dtype=np.float32)
    rows[0, 0] = 1.0
    blob = get_codec("turbo4").encode(rows)
    assert blob.hex(" ") == "44 " * 16 + "a8 31"
    decoded = get_codec("turbo4").decode(blob, 32)
    assert round(float(decoded[0, 0]), 5) == 0.94224
    assert float(np.abs(decoded[0, 1:]).max()) < 1e-6


def test_int8_worked_example_matches_the_docstring() -> None:
    blob = get_codec("int8").encode(np.array([[0.5, -1.0, 0.25, 0.0]], dtype=np.float32))
    assert blob.hex(" ") == "40 81 20 00 08 20"


def test_fp8_worked_example_matches_the_docstring() -> None:
    rows = ((np.arange(32) - 16) / 8).astype(np.float32)[None]
    blob = get_codec("fp8").encode(rows)
    assert blob[:6].hex(" ") == "fe fd fc fb fb fa"
    assert blob[16:18].hex(" ") == "00 5e"
    assert blob[32:].hex(" ") == "92 1c"


def test_mlx4g32_worked_example_matches_the_docstring() -> None:
    blob = get_codec("mlx4g32").encode((np.arange(32) / 10).astype(np.float32)[None])
    assert blob.hex(" ") == "00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff 9d 32 00 00"


@pytest.mark.parametrize("name", ALL)
def test_zero_rows_decode_to_exact_zeros(name: str) -> None:
    rows = np.zeros((3, 64), dtype=np.float32)
    assert roundtrip(name, rows).tolist() == rows.tolist()


@pytest.mark.parametrize("name", ["int8", "fp8", "mlx4g32"])
def test_constant_rows_keep_their_fp16_value(name: str) -> None:
    rows = np.full((2, 64), 0.3, dtype=np.float32)
    expected = np.float32(np.float16(0.3)) if name == "mlx4g32" else None
    decoded = roundtrip(name, rows)
    if expected is not None:
        assert decoded.tolist() == [[float(expected)] * 64] * 2
    else:
        assert (np.abs(decoded - rows) <= BOUNDS[name](rows)).all()


@pytest.mark.parametrize("name", ALL)
def test_an_empty_batch_encodes_to_no_bytes_and_decodes_to_no_rows(name: str) -> None:
    codec = get_codec(name)
    assert codec.encode(np.zeros((0, 64), dtype=np.float32)) == b""
    assert codec.decode(b"", 64).shape == (0, 64)


@pytest.mark.parametrize("name", ALL)
def test_decode_returns_the_requested_dtype(name: str) -> None:
    rows = gaussian_rows(4, 64)
    codec = get_codec(name)
    blob = codec.encode(rows)
    as32 = codec.decode(blob, 64)
    as16 = codec.decode(blob, 64, np.float16)
    assert (as32.dtype, as16.dtype, as16.shape) == (np.float32, np.float16, (4, 64))
    assert as16.tolist() == as32.astype(np.float16).tolist()


@pytest.mark.parametrize("name", ALL)
def test_a_blob_that_is_not_whole_rows_is_refused(name: str) -> None:
    codec = get_codec(name)
    blob = codec.encode(gaussian_rows(2, 64))
    with pytest.raises(CodecError, match="not a whole number of"):
        codec.decode(blob[:-1], 64)


@pytest.mark.parametrize("name", ALL)
def test_rows_that_are_not_a_2d_matrix_are_refused(name: str) -> None:
    with pytest.raises(CodecError, match="2-D"):
        get_codec(name).encode(np.zeros(64, dtype=np.float32))


@pytest.mark.parametrize("name", QUANTIZED)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_quantized_formats_refuse_nan_and_inf_naming_the_row(name: str, bad: float) -> None:
    rows = gaussian_rows(3, 64)
    rows[1, 40] = bad
    with pytest.raises(CodecError, match=f"^{name} cannot store NaN or Inf \\(found in row 1\\)"):
        get_codec(name).encode(rows)


def test_fp32_and_fp16_store_nan_and_inf_faithfully() -> None:
    rows = np.array([[np.nan, np.inf, -np.inf, 1.5]], dtype=np.float32)
    for name in ("fp32", "fp16"):
        decoded = roundtrip(name, rows)
        assert np.isnan(decoded[0, 0]) == np.True_
        assert decoded[0, 1:].tolist() == [np.inf, -np.inf, 1.5]


@pytest.mark.parametrize("name,value", [("int8", 1e7), ("fp8", 4e7), ("mlx4g32", 7e4),
                                        ("turbo4", 3e5), ("turbo2", 3e5)])
def test_values_whose_scale_overflows_fp16_are_refused(name: str, value: float) -> None:
    rows = gaussian_rows(2, 64)
    rows[0, :] = value
    with pytest.raises(CodecError, match=f"values too large for {name}"):
        get_codec(name).encode(rows)


@st.composite
def row_batches(draw: st.DrawFn, grouped: bool) -> np.ndarray:
    n = draw(st.integers(0, 5))
    kv_dim = draw(st.sampled_from([32, 64, 96, 192, 256])) if grouped else draw(st.integers(1, 80))
    magnitude = draw(st.sampled_from([1e-6, 1e-2, 1.0, 30.0, 3e3]))
    rows = draw(arrays(np.float32, (n, kv_dim),
                       elements=st.floats(-1.0, 1.0, width=32, allow_subnormal=False)))
    return rows * np.float32(magnitude)


@settings(max_examples=40, deadline=None)
@given(rows=row_batches(grouped=False))
def test_hypothesis_int8_respects_its_bound_for_any_shape(rows: np.ndarray) -> None:
    err = np.abs(roundtrip("int8", rows).astype(np.float64) - rows)
    assert (err <= int8_bound(rows)).all()


@settings(max_examples=40, deadline=None)
@given(rows=row_batches(grouped=True), name=st.sampled_from(["fp8", "mlx4g32"]))
def test_hypothesis_group_formats_respect_their_bound_for_any_shape(rows: np.ndarray, name: str) -> None:
    err = np.abs(roundtrip(name, rows).astype(np.float64) - rows)
    assert (err <= BOUNDS[name](rows)).all()


@settings(max_examples=40, deadline=None)
@given(rows=row_batches(grouped=True), bits=st.sampled_from([2, 3, 4]))
def test_hypothesis_turbo_picks_nearest_levels_for_any_shape(rows: np.ndarray, bits: int) -> None:
    assert_turbo_codes_are_nearest_levels(rows, roundtrip(f"turbo{bits}", rows), bits)


@settings(max_examples=30, deadline=None)
@given(rows=row_batches(grouped=False))
def test_hypothesis_fp32_and_fp16_round_trip_for_any_shape(rows: np.ndarray) -> None:
    assert roundtrip("fp32", rows).tobytes() == rows.tobytes()
    assert roundtrip("fp16", rows).tolist() == rows.astype(np.float16).astype(np.float32).tolist()


@pytest.fixture(scope="module")
def real_kv() -> dict[str, np.ndarray]:
    """Every 4th row of the fixture's K and V (1280 rows each, D = 192)."""
    data = np.load(REAL_KV)
    return {side: data[side].astype(np.float32).reshape(-1, 192)[::4].copy() for side in ("k", "v")}


@pytest.mark.parametrize("side", ["k", "v"])
@pytest.mark.parametrize("name", QUANTIZED)
def test_real_smollm2_k_and_v_round_trip_within_each_formats_guarantee(
        real_kv: dict[str, np.ndarray], side: str, name: str) -> None:
    rows = real_kv[side]
    decoded = roundtrip(name, rows)
    if name.startswith("turbo"):
        assert_turbo_codes_are_nearest_levels(rows, decoded, int(name[-1]))
    else:
        assert (np.abs(decoded.astype(np.float64) - rows) <= BOUNDS[name](rows)).all()
