"""The Hadamard-rotated per-head formats (issue 20, third round: ``int{5,6}h{64,128}r``, ``int{5,6}h64rs128``).

(The generic checks -- zero rows, dtypes, NaN refusal naming the row, partial blobs, row sizes -- run
for them in test_kivi_and_per_head_codecs.py; golden vectors in test_codec_golden_grouped.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
from grouped_bounds import per_head_narrow_bound

from pion.codecs import get_codec
from pion.codecs.rotated import rotate_heads, sylvester
from pion.common.errors import CodecError

ROTATED = {"int6h64r": ("int6h64", 64, 6), "int5h64r": ("int5h64", 64, 5), "int6h128r": ("int6h128", 128, 6),
           "int5h128r": ("int5h128", 128, 5)}


def v_like_rows(n: int, kv_dim: int = 256, seed: int = 0) -> np.ndarray:
    """Gaussian rows where a few channels of each head are 8x larger (what the rotation is for)."""
    x = np.random.default_rng(seed).standard_normal((n, kv_dim)).astype(np.float32)
    x[:, 5::64] *= 8
    return x


def test_int6h64r_worked_example_matches_the_docstring() -> None:
    x = np.zeros((1, 64), dtype=np.float32)
    x[0, 0] = 8.0
    codec = get_codec("int6h64r")
    blob = codec.encode(x)
    assert blob == bytes([0xff] * 48) + bytes.fromhex("2128")
    decoded = codec.decode(blob, 64)
    assert round(float(decoded[0, 0]), 6) == 7.999756
    assert float(np.abs(decoded[0, 1:]).max()) < 1e-6


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_rotation_is_the_orthonormal_sylvester_hadamard_and_its_own_inverse(head_dim: int) -> None:
    x = v_like_rows(4)
    w = sylvester(head_dim) / np.sqrt(head_dim)
    full = (x.reshape(-1, head_dim) @ w).reshape(x.shape)
    assert np.abs(rotate_heads(x, head_dim) - full).max() < 1e-5
    assert np.abs(rotate_heads(rotate_heads(x, head_dim), head_dim) - x).max() < 1e-5
    assert (sylvester(4) == np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]])).all()


@pytest.mark.parametrize("name", sorted(ROTATED))
def test_each_heads_l2_error_is_within_the_base_bound_on_the_rotated_head(name: str) -> None:
    base, head_dim, bits = ROTATED[name]
    x = np.concatenate([v_like_rows(60), v_like_rows(20, seed=1) * 300])
    y = rotate_heads(x, head_dim).astype(np.float64)
    err = (get_codec(name).decode(get_codec(name).encode(x), 256) - x).reshape(80, -1, head_dim)
    bound = per_head_narrow_bound(y.astype(np.float32), head_dim, bits).reshape(80, -1, head_dim)
    slack = 1e-5 * np.abs(x).reshape(80, -1, head_dim).max(axis=2)
    assert (np.linalg.norm(err, axis=2) <= np.linalg.norm(bound, axis=2) + slack).all()


@pytest.mark.parametrize("name", sorted(ROTATED))
def test_rotation_shrinks_the_error_when_a_few_channels_dominate_a_head(name: str) -> None:
    base = ROTATED[name][0]
    x = v_like_rows(128, seed=2)
    plain = float(np.abs(get_codec(base).decode(get_codec(base).encode(x), 256) - x).mean())
    rotated = float(np.abs(get_codec(name).decode(get_codec(name).encode(x), 256) - x).mean())
    assert rotated < 0.75 * plain


def test_a_head_that_overflows_fp16_after_rotation_is_refused_under_the_rotated_name() -> None:
    x = v_like_rows(3)
    x[1, :64] = 3e6
    with pytest.raises(CodecError) as info:
        get_codec("int6h64r").encode(x)
    assert str(info.value) == "values too large for int6h64r: a head scale exceeds fp16's range (+/-65504)"


def test_the_sink_variant_keeps_the_first_row_exact_and_rotates_the_rest() -> None:
    x = v_like_rows(128, seed=3)
    decoded = get_codec("int6h64rs128").decode(get_codec("int6h64rs128").encode(x), 256)
    assert decoded[0].tolist() == x[0].astype(np.float16).astype(np.float32).tolist()
    stored = x.copy()
    stored[0] = x[1]
    assert decoded[1:].tolist() == get_codec("int6h64r").decode(get_codec("int6h64r").encode(stored), 256)[1:].tolist()
