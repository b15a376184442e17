"""Segment planning, namespaces and the LRU-leaf budget (no model, no server)."""

from __future__ import annotations

from typing import Any

import pytest

from pion.common.ids import Namespace
from pion.llm.budget import LruLeafBudget
from pion.llm.segments import ModelShape, chain_links, child_namespace, plan_chat, plan_text, root_namespace
from support.llm_procs import MODEL

ROOT = root_namespace(ModelShape(30, 3, 64, model_id="m@1"), "fp16")


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    from pion.client.runtimes.model_files import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(MODEL).path)


def test_a_chat_is_cut_at_message_boundaries_and_the_generation_prompt_is_the_tail(tok: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
    plan = plan_chat(tok, messages)
    assert [tok.decode(seg) for seg in plan.segments] == [
        "<|im_start|>system\nBe brief.<|im_end|>\n", "<|im_start|>user\nHi<|im_end|>\n",
        "<|im_start|>assistant\nHello!<|im_end|>\n", "<|im_start|>user\nBye<|im_end|>\n"]
    assert tok.decode(plan.tail) == "<|im_start|>assistant\n"
    assert plan.ids == tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]


def test_two_conversations_with_the_same_system_prompt_share_its_segment(tok: Any) -> None:
    a = chain_links(ROOT, plan_chat(tok, [{"role": "system", "content": "S"}, {"role": "user", "content": "A"}]))
    b = chain_links(ROOT, plan_chat(tok, [{"role": "system", "content": "S"}, {"role": "user", "content": "B"}]))
    assert a[0].namespace == b[0].namespace
    assert a[1].namespace != b[1].namespace
    assert a[1].parent == a[0].namespace
    assert a[1].start == a[0].n_tokens


def test_a_segment_namespace_depends_on_its_whole_lineage() -> None:
    same_ids = [5, 6, 7]
    assert child_namespace(Namespace("p1"), same_ids) != child_namespace(Namespace("p2"), same_ids)
    assert child_namespace(Namespace("p1"), same_ids) == child_namespace(Namespace("p1"), list(same_ids))
    shape = ModelShape(30, 3, 64, model_id="m@1")
    assert root_namespace(shape, "fp16") != root_namespace(shape, "fp8")


def test_a_raw_prompt_is_cut_into_whole_chunks_and_the_end_is_never_stored() -> None:
    plan = plan_text(list(range(300)), chunk_tokens=128)
    assert [len(s) for s in plan.segments] == [128, 128]
    assert len(plan.tail) == 44
    exact = plan_text(list(range(256)), chunk_tokens=128)
    assert [len(s) for s in exact.segments] == [128]
    assert len(exact.tail) == 128


def ns(name: str) -> Namespace:
    return Namespace(name)


def test_the_budget_evicts_least_recently_used_leaves_and_never_an_interior_segment() -> None:
    budget = LruLeafBudget(max_bytes=30)
    budget.touch_chain([(ns("sys"), None, 10), (ns("a1"), ns("sys"), 10)])
    budget.touch_chain([(ns("sys"), None, 10), (ns("b1"), ns("sys"), 10)])
    assert budget.victims() == []
    budget.touch_chain([(ns("sys"), None, 10), (ns("a1"), ns("sys"), 10), (ns("a2"), ns("a1"), 10)])
    # 40 bytes held: b1 is the least recently used leaf; sys and a1 are interior.
    assert budget.victims() == [ns("b1")]
    assert budget.total_bytes == 30
    budget.max_bytes = 10
    assert budget.victims() == [ns("a2"), ns("a1")]
    assert budget.is_leaf(ns("sys")) is True


def test_a_budget_of_none_never_evicts() -> None:
    budget = LruLeafBudget(max_bytes=None)
    budget.touch_chain([(ns("x"), None, 10**12)])
    assert budget.victims() == []
    assert len(budget) == 1
