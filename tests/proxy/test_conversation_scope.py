"""Scope v2: a follow-up is compared by its resolved text; system prompt, tools and model
stay exact scope parts; histories with tool calls or images stay hashed exactly."""

from __future__ import annotations

from typing import Any

from pion.proxy.scope import CONTEXT_TURNS, resolved_text, scope_of


def _conv(*turns: tuple[str, Any], **extra: object) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": r, "content": c} for r, c in turns], **extra}


def test_a_follow_up_resolves_with_its_earlier_user_turns_and_not_the_assistant_ones() -> None:
    body = _conv(("system", "You are support."), ("user", "I have a Flixora plan."),
                 ("assistant", "Great, how can I help?"), ("user", "Cancel it."))
    assert resolved_text(body) == "I have a Flixora plan. Cancel it."


def test_only_the_last_context_turns_are_kept() -> None:
    turns = [("user", f"turn {i}.") for i in range(5)]
    body = _conv(*turns, ("user", "And then?"))
    assert CONTEXT_TURNS == 2
    assert resolved_text(body) == "turn 3. turn 4. And then?"


def test_a_single_question_resolves_to_itself() -> None:
    assert resolved_text(_conv(("system", "S"), ("user", "How do I reset my password?"))) == \
        "How do I reset my password?"


def test_text_parts_of_a_content_list_count_as_text() -> None:
    body = _conv(("user", [{"type": "text", "text": "My bank is Crestline."}]), ("assistant", "OK."),
                 ("user", [{"type": "text", "text": "How do I close it?"}]))
    assert resolved_text(body) == "My bank is Crestline. How do I close it?"


def test_paraphrased_contexts_share_a_scope_and_different_system_prompts_do_not() -> None:
    a = _conv(("system", "S"), ("user", "I have a Flixora plan."), ("assistant", "OK."), ("user", "Cancel it."))
    b = _conv(("system", "S"), ("user", "My Flixora subscription is active."), ("assistant", "Sure."),
              ("user", "Please cancel it."))
    c = _conv(("system", "T"), ("user", "I have a Flixora plan."), ("assistant", "OK."), ("user", "Cancel it."))
    assert (scope_of(a, "pion", "m") == scope_of(b, "pion", "m"), scope_of(a, "pion", "m") == scope_of(c, "pion", "m")) \
        == (True, False)


def test_a_history_with_tool_calls_is_hashed_exactly_and_not_resolved() -> None:
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    base = [{"role": "user", "content": "Look it up."}, call, {"role": "tool", "tool_call_id": "1", "content": "42"}]
    a = {"model": "m", "messages": [*base, {"role": "user", "content": "And then?"}]}
    b = {"model": "m", "messages": [*base[:2], {"role": "tool", "tool_call_id": "1", "content": "43"},
                                    {"role": "user", "content": "And then?"}]}
    assert resolved_text(a) == "And then?"
    assert scope_of(a, "pion", "m") != scope_of(b, "pion", "m")


def test_an_image_in_the_history_keeps_the_history_in_the_scope() -> None:
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    a = _conv(("user", image), ("assistant", "A cat."), ("user", "What breed?"))
    b = _conv(("user", [{"type": "image_url", "image_url": {"url": "data:image/png;base64,BBBB"}}]),
              ("assistant", "A cat."), ("user", "What breed?"))
    assert resolved_text(a) == "What breed?"
    assert scope_of(a, "pion", "m") != scope_of(b, "pion", "m")
