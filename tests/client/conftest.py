"""Client fixtures: the real SmolLM2 model, loaded once per test session."""

from __future__ import annotations

import os
from typing import Any

import pytest


@pytest.fixture(scope="session")
def smollm() -> tuple[Any, Any]:
    """(model, tokenizer) of the embedded SmolLM2-135M, fp32 on CPU (converted once, then cached)."""
    import torch

    from pion import load_model

    # One intra-op thread: on a shared 2-core box, OpenMP spin-waiting makes 2 threads ~3x slower per token.
    torch.set_num_threads(1)
    return load_model(device="cpu")


@pytest.fixture(scope="session")
def smollm_mlx() -> tuple[Any, Any]:
    """(model, tokenizer) of the same SmolLM2 for mlx-lm (fp32, MLX's default device).

    Skips without mlx-lm, and on a machine without Metal unless ``PION_TEST_MLX=1`` (``make
    test-mlx``): MLX's Linux CPU backend runs SmolLM2 ~50x slower than torch here (docs/runtime.md,
    "MLX runtime"), which would add minutes to ``make test``.
    """
    mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
    pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (the [mlx] extra)")
    if not mx.metal.is_available() and os.environ.get("PION_TEST_MLX") != "1":
        pytest.skip("SmolLM2 on MLX's CPU backend is slow: run these with make test-mlx (PION_TEST_MLX=1)")
    from pion import load_model

    return load_model(runtime="mlx")
