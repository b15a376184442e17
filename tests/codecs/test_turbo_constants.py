"""The turbo codecs' hard-coded constants match a fresh computation, and the rotation is exact."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from pion.codecs.turbo import LLOYD_MAX_POSITIVE, SIGN_MASK, SIGN_SEED, _nearest_level, codebook, rotation_matrix

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "lloyd_max_codebooks.py"


@pytest.fixture(scope="module")
def recompute() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lloyd_max_codebooks", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_hard_coded_codebooks_equal_a_fresh_lloyd_max_run(recompute: ModuleType, bits: int) -> None:
    fresh = recompute.lloyd_max_gaussian(bits)
    positive = fresh[len(fresh) // 2:]
    # constants are printed to 9 decimals; the codec uses them as float32
    np.testing.assert_allclose(LLOYD_MAX_POSITIVE[bits], positive, rtol=0, atol=1e-9)
    assert codebook(bits).tolist() == np.asarray(fresh, dtype=np.float32).tolist()


def test_the_sign_mask_comes_from_the_documented_seed(recompute: ModuleType) -> None:
    assert (SIGN_SEED, recompute.sign_mask(SIGN_SEED)) == (1974, SIGN_MASK)


def test_the_rotation_is_orthogonal_so_decoding_inverts_it() -> None:
    m = rotation_matrix().astype(np.float64)
    np.testing.assert_allclose(m @ m.T, np.eye(32), atol=1e-6)


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_grid_quantizer_equals_searchsorted_over_the_boundaries(bits: int) -> None:
    levels = codebook(bits)
    bounds = ((levels[1:] + levels[:-1]) / 2).astype(np.float32)
    grid = (np.arange(-97, 98) / 16).astype(np.float32)
    probes = np.concatenate([
        np.random.default_rng(bits).standard_normal(200_000).astype(np.float32) * 2,
        bounds, np.nextafter(bounds, np.float32(np.inf)), np.nextafter(bounds, np.float32(-np.inf)),
        grid, np.nextafter(grid, np.float32(np.inf)), np.nextafter(grid, np.float32(-np.inf)),
        np.array([-1e30, -6.0, 5.657, 6.0, 1e30], dtype=np.float32),
    ])
    assert _nearest_level(probes, bits).tolist() == np.searchsorted(bounds, probes).tolist()
