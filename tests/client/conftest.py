"""Client fixtures: the real SmolLM2 model, loaded once per test session."""

from __future__ import annotations

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
