"""The first-row-in-fp16 formats (issue 20, third round: ``kivi{5,6}g128s``, ``int{6,7}h{64,128}s128``).

(The generic checks -- zero rows, dtypes, NaN refusal naming the row, partial blobs, row sizes -- run
for them in test_kivi_and_per_head_codecs.py; golden vectors in test_codec_golden_grouped.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
from grouped_bounds import kivi_bound, per_head_narrow_bound

from pion.codecs import get_codec
from pion.codecs.base import token_group
from pion.common.errors import CodecError

SINK = {"kivi6g128s": "kivi6g128", "kivi5g128s": "kivi5g128", "kivi7g128s": "kivi7g128", "int5h64s128": "int5h64",
        "int6h64s128": "int6h64",
        "int7h64s128": "int7h64", "int6h128s128": "int6h128", "int7h128s128": "int7h128",
        "kivi8g128s": "kivi8g128", "int4h64s128": "int4h64"}  # fifth round: the per-layer menu's ends


def k_with_a_sink(n: int, kv_dim: int = 128, seed: int = 0) -> np.ndarray:
    """Gaussian rows with an outlier channel; row 0 (and row 128 when present) far outside the rest."""
    x = np.random.default_rng(seed).standard_normal((n, kv_dim)).astype(np.float32)
    x[:, 3] = 20 + x[:, 3]
    x[::128] = np.where(np.arange(kv_dim) % 2 == 0, 9.0, -6.5).astype(np.float32)
    return x


def test_int6h64s128_worked_example_matches_the_docstring() -> None:
    x = np.zeros((128, 64), dtype=np.float32)
    x[:, 0] = 0.25
    x[0, :2] = [1.5, -2.0]
    codec = get_codec("int6h64s128")
    row = codec.row_bytes(64)
    assert row == 51
    blob = codec.encode(x)
    assert (blob[:2].hex(" "), blob[32:34].hex(" "), blob[48:51].hex(" ")) == ("0f 00", "ab aa", "21 20 00")
    assert [blob[r * row + 50] for r in range(5)] == [0x00, 0x3e, 0x00, 0xc0, 0x00]
    decoded = codec.decode(blob, 64)
    assert decoded[0, :3].tolist() == [1.5, -2.0, 0.0]
    assert round(float(decoded[1, 0]), 6) == 0.249992


@pytest.mark.parametrize("name", sorted(SINK))
def test_the_token_group_is_128(name: str) -> None:
    assert token_group(get_codec(name)) == 128


@pytest.mark.parametrize("name", sorted(SINK))
def test_the_first_row_of_each_full_group_is_fp16_exact_and_tail_rows_are_the_base_format(name: str) -> None:
    rows = k_with_a_sink(300)
    codec, base = get_codec(name), get_codec(SINK[name])
    decoded = codec.decode(codec.encode(rows), 128)
    assert decoded[[0, 128]].tolist() == rows[[0, 128]].astype(np.float16).astype(np.float32).tolist()
    stored = rows.copy()
    stored[[0, 128]] = rows[[1, 129]]  # what the base format is given
    assert decoded[256:].tolist() == base.decode(base.encode(stored), 128)[256:].tolist()  # tail: unprotected
    assert decoded[256].tolist() != rows[256].astype(np.float16).astype(np.float32).tolist()


@pytest.mark.parametrize("name", sorted(SINK))
def test_the_other_rows_keep_the_base_formats_bound(name: str) -> None:
    rows = k_with_a_sink(256, seed=3)
    stored = rows.copy()
    stored[::128] = rows[1::128]
    err = np.abs(get_codec(name).decode(get_codec(name).encode(rows), 128).astype(np.float64) - rows)
    base = SINK[name]
    if base.startswith("kivi"):
        bound = kivi_bound(stored, int(base[4]), 128)
    else:
        bound = per_head_narrow_bound(stored, int(base.split("h")[1]), int(base[3]))
    others = np.ones(256, dtype=bool)
    others[::128] = False
    assert (err[others] <= bound[others]).all()


@pytest.mark.parametrize("name", ["kivi6g128s", "kivi5g128s", "kivi7g128s", "kivi8g128s"])
def test_leaving_the_sink_out_of_the_channel_ranges_shrinks_the_other_rows_error(name: str) -> None:
    rows = k_with_a_sink(128, seed=5)
    base = get_codec(SINK[name])
    plain = np.abs(base.decode(base.encode(rows), 128) - rows)[1:].mean()
    sink = np.abs(get_codec(name).decode(get_codec(name).encode(rows), 128) - rows)[1:].mean()
    assert sink < 0.6 * plain


def test_a_first_row_beyond_fp16_is_refused() -> None:
    rows = k_with_a_sink(128)
    rows[0, 7] = 1e6  # the base never sees row 0; its fp16 copy would overflow
    with pytest.raises(CodecError) as info:
        get_codec("int7h64s128").encode(rows)
    assert str(info.value) == ("values too large for int7h64s128: a group's first-row value exceeds fp16's range "
                               "(+/-65504)")


@pytest.mark.parametrize("name", ["kivi6g128s", "int6h64s128"])
def test_a_nan_in_the_protected_row_is_refused_too(name: str) -> None:
    rows = k_with_a_sink(130)
    rows[0, 1] = np.nan
    with pytest.raises(CodecError) as info:
        get_codec(name).encode(rows)
    assert str(info.value) == f"{name} cannot store NaN or Inf (found in row 0); nothing was stored"


@pytest.mark.parametrize("name", sorted(SINK))
def test_full_groups_are_encoded_each_on_their_own(name: str) -> None:
    rows = k_with_a_sink(256, seed=9)
    codec = get_codec(name)
    assert codec.encode(rows) == codec.encode(rows[:128]) + codec.encode(rows[128:])
