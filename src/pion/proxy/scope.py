"""Which cache partition a request belongs to, and whether it may be looked up or stored.

The scope is a hard partition applied before any similarity: the SHA-256 of everything
that could change the answer besides the conversation itself (backend, model, system
prompt, tools, response_format), plus the embedder. Two requests share a scope only when
all of that is byte-identical.

Conversations (scope v2, issue 18): a follow-up such as "cancel it" means nothing alone,
and hashing the earlier turns exactly meant no follow-up ever hit. So the earlier *user*
turns (the last ``CONTEXT_TURNS``) are no longer hashed; they are prepended to the
question (``resolved_text``) and that resolved text is what gets embedded, compared and
verified, so "I have a Flixora plan. / Please cancel it." matches "My Flixora
subscription is active. / How do I cancel it?" and never "I have a gym membership. /
Cancel it." Assistant turns are left out (they restate the user's context in the
model's words). A history holding tool calls, tool results or non-text content is still
hashed exactly, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NewType

from pion.proxy.backends.base import text_of

ScopeKey = NewType("ScopeKey", str)
SCOPE_VERSION = 2
# Earlier user turns that resolve a follow-up; older ones rarely change what "it" means.
CONTEXT_TURNS = 2
# Roles that set the rules of the conversation: always part of the exact scope.
_EXACT_ROLES = ("system", "developer")
# Request fields that change what a correct answer is; sampling knobs do not.
_SCOPE_FIELDS = ("tools", "tool_choice", "functions", "function_call", "response_format")


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """What this request allows: look up (``lookup``), store the answer (``store``)."""

    lookup: bool
    store: bool
    reason: str = ""


def scope_of(body: Mapping[str, Any], backend: str, model: str, embedder: str = "pion") -> ScopeKey:
    """The scope hash of a chat-completions request (all but its last message).

    ``embedder`` names the vector space: vectors of different embedders never share a scope.
    """
    messages = list(body.get("messages") or [])
    history = messages[:-1]
    if _plain_dialogue(history):  # user/assistant text turns resolve into the compared text
        history = [m for m in history if m.get("role") in _EXACT_ROLES]
    parts = {
        "v": SCOPE_VERSION, "backend": backend, "model": model, "embedder": embedder,
        "history": history,
        **{k: body[k] for k in _SCOPE_FIELDS if body.get(k) is not None},
    }
    canon = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return ScopeKey(hashlib.sha256(canon.encode()).hexdigest()[:32])


def last_user_text(body: Mapping[str, Any]) -> str | None:
    """The text of the last message when it is a user message, else None."""
    messages = body.get("messages") or []
    if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "user":
        return None
    text = text_of(messages[-1].get("content"))
    return text if text.strip() else None


def _plain_dialogue(history: list[Any]) -> bool:
    """Only system/developer/user/assistant messages with plain text, no tool calls."""
    for m in history:
        if not isinstance(m, dict) or m.get("role") not in (*_EXACT_ROLES, "user", "assistant"):
            return False
        if m.get("tool_calls") or m.get("function_call") or m.get("name"):
            return False
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                return False  # an image or audio part: the words alone do not say what was asked
        elif content is not None and not isinstance(content, str):
            return False
    return True


def resolved_text(body: Mapping[str, Any]) -> str | None:
    """The text that is embedded, compared and verified: the last user message, preceded
    by up to ``CONTEXT_TURNS`` earlier user turns when the history is a plain dialogue.

    ``{"messages": [{"role": "user", "content": "I have a Flixora plan."},
    {"role": "assistant", ...}, {"role": "user", "content": "Cancel it."}]}`` resolves to
    ``"I have a Flixora plan. Cancel it."``.
    """
    question = last_user_text(body)
    if question is None:
        return None
    history = list(body.get("messages") or [])[:-1]
    if not _plain_dialogue(history):
        return question
    turns = [text_of(m.get("content")).strip() for m in history if m.get("role") == "user"]
    context = [t for t in turns if t][-CONTEXT_TURNS:]
    return " ".join([*context, question.strip()]) if context else question


def cache_policy(body: Mapping[str, Any], headers: Mapping[str, str], cache_on: bool) -> CachePolicy:
    """Apply Cache-Control / body ``cache`` options, n > 1 and message shape rules."""
    if not cache_on:
        return CachePolicy(False, False, "cache disabled")
    directives = {d.strip().lower() for d in headers.get("cache-control", "").split(",")}
    raw = body.get("cache")
    opts: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    no_cache = "no-cache" in directives or bool(opts.get("no-cache") or opts.get("no_cache"))
    no_store = "no-store" in directives or bool(opts.get("no-store") or opts.get("no_store"))
    n = body.get("n")
    if isinstance(n, int) and n > 1:
        return CachePolicy(False, False, "n > 1")
    if last_user_text(body) is None:
        return CachePolicy(False, False, "last message is not user text")
    return CachePolicy(not no_cache, not no_store, "cache-control" if no_cache or no_store else "")


def storable(completion: Mapping[str, Any]) -> str | None:
    """The answer text when a completion may be cached: one choice, finished by "stop",
    no tool calls, non-empty text. None otherwise."""
    choices = completion.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message") or {}
    if choice.get("finish_reason") != "stop" or message.get("tool_calls") or message.get("function_call"):
        return None
    content = message.get("content")
    return content if isinstance(content, str) and content else None
