"""The in-process pion-llm engine with the real SmolLM2: one model per test module and a greedy
chat turn, shared by the engine and the Stage-2 engine tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pion.llm.engine import Engine, SamplingParams
from pion.llm.segments import plan_chat
from support.llm_procs import MODEL

SYSTEM = "You are a math tutor. Answer with the number and one short sentence. " * 6
GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


@pytest.fixture(scope="module")
def model_and_tokenizer() -> Iterator[tuple[Any, Any]]:
    """SmolLM2 loaded once per module on one torch thread (restored afterwards)."""
    import torch

    from pion.client.runtimes.transformers_runtime import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield load_model(MODEL, device="cpu")
    finally:
        torch.set_num_threads(threads)


def run(engine: Engine, messages: list[dict[str, str]]) -> tuple[str, int]:
    """One greedy chat turn: (text, prompt tokens served from the cache)."""
    gen = engine.start(plan_chat(engine.tokenizer, messages), GREEDY)
    pieces = []
    while (step := gen.next_step()) is not None:
        pieces.append(step.text)
    gen.finish()
    return "".join(pieces), gen.cached_tokens
