"""The engine in-process with the real SmolLM2: restored chains give the same greedy text as a cold prefill."""

from __future__ import annotations

from typing import Any

import pytest

from pion.llm.engine import Engine
from pion.llm.segments import plan_chat
from pion.llm.stores import MemorySegmentStore
from support.llm_engine import SYSTEM, model_and_tokenizer, run  # the fixture too
from support.llm_procs import MODEL

pytestmark = pytest.mark.slow  # loads SmolLM2 in this process


def test_a_restored_chain_gives_the_same_greedy_text_as_a_cold_prefill(model_and_tokenizer: tuple[Any, Any]) -> None:
    model, tok = model_and_tokenizer
    cached = Engine(model, tok, MODEL, MemorySegmentStore())
    cold = Engine(model, tok, MODEL, None)
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2+2?"}]
    answer, restored = run(cached, turn1)
    assert restored == 0
    turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "And 3+3?"}]
    warm_text, warm_cached = run(cached, turn2)
    cold_text, cold_cached = run(cold, turn2)
    assert cold_cached == 0
    assert warm_cached == len(plan_chat(tok, turn1).segments[0]) + len(plan_chat(tok, turn1).segments[1])
    assert warm_text == cold_text


def test_an_in_process_budget_drops_leaves_from_memory(model_and_tokenizer: tuple[Any, Any]) -> None:
    model, tok = model_and_tokenizer
    store = MemorySegmentStore()
    engine = Engine(model, tok, MODEL, store, budget_bytes=130 * 2 * 30 * 192 * 4)  # 130 tokens of fp32 rows
    for user in range(4):
        run(engine, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"User {user}: 1+{user}?"}])
    assert engine.budget.total_bytes <= engine.budget.max_bytes  # type: ignore[operator]
    assert len(engine.budget) == 3  # the system segment (96 tokens) and the two newest leaves (14 each)
    assert store.status()["segments"] == len(engine.budget)
    # The budget counts what memory really holds: the kept tensors, in the model's dtype.
    assert engine.budget.total_bytes == sum(r.keys.nbytes + r.values.nbytes for r in store._rows.values())
    _, cached = run(engine, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "User 9: 1+9?"}])
    assert cached == len(plan_chat(tok, [{"role": "system", "content": SYSTEM}]).segments[0])
