"""The in-process pion-llm engine with the real SmolLM2: one model per test module and a greedy
chat turn, shared by the engine and the Stage-2 engine tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


def check_stage2_turns(engine_for: Callable[[bool], Engine], cold: Engine) -> None:
    """Two chat turns through a Stage-2 engine give the cold engine's greedy text; turn 2 restores
    turn 1's segments over the wire; a fresh Stage-2 engine (another process's view) restores the
    longer chain, and a Stage-1 engine restoring by V.MFETCH agrees with it.

    ``engine_for(stage2)`` builds an engine on the same model and pion-server; the torch and the
    MLX runtimes run the same check."""
    stage2 = engine_for(True)
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2+2?"}]
    answer, restored = run(stage2, turn1)
    assert (restored, answer) == (0, run(cold, turn1)[0])
    assert answer != ""  # 12 tokens, not an immediate EOS
    turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "And 3+3?"}]
    warm_text, warm_cached = run(stage2, turn2)
    segments = plan_chat(stage2.tokenizer, turn1).segments
    assert warm_cached == len(segments[0]) + len(segments[1])
    assert warm_text == run(cold, turn2)[0]
    assert stage2.stage2 is not None and stage2.stage2.counters.wire_calls > 0
    # The fresh engine also restores turn 2's own user message, stored by the run above.
    fresh_text, fresh_cached = run(engine_for(True), turn2)
    assert (fresh_text, fresh_cached > warm_cached) == (warm_text, True)
    assert run(engine_for(False), turn2) == (fresh_text, fresh_cached)
