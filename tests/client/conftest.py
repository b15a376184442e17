"""Client fixtures: the real SmolLM2 model, loaded once per test session."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def smollm() -> tuple[Any, Any]:
    """(model, tokenizer) of the embedded SmolLM2-135M, fp32 on CPU (converted once, then cached)."""
    from pion import load_model

    return load_model(device="cpu")
