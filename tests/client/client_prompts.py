"""Prompts the client tests share: SmolLM2-Instruct chat turns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SYSTEM_PROMPTS = [
    "You are a support agent for Acme Cloud. Answer in one or two sentences, politely and precisely.",
    "You are a travel assistant. Suggest practical, budget-friendly ideas and keep answers short.",
    "You are a cooking helper. Give clear step-by-step instructions using common ingredients.",
    "You are a Python tutor. Explain concepts simply and include a tiny code example when useful.",
    "You are a fitness coach. Give safe, encouraging advice suited to beginners.",
]

QUESTIONS = [
    "How do I reset my password?",
    "What should I see in Paris in one day?",
    "How do I make a simple tomato soup?",
    "What is a list comprehension?",
    "How often should I stretch?",
]


def system_turn(text: str) -> str:
    """The cached prefix: a system turn."""
    return f"<|im_start|>system\n{text}<|im_end|>\n"


def user_turn(question: str) -> str:
    """The suffix after a cached system prompt: one user turn and the assistant header."""
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def greedy_agreement(model: Any, suffix: Sequence[int], cache: Any, reference: Sequence[int],
                     eos_ids: set[int], max_tokens: int) -> int:
    """How many leading tokens of ``reference`` (a greedy completion) greedy decoding from ``cache`` reproduces.

    One teacher-forced forward over suffix + reference gives every step's argmax at once, so checking
    a 50-token completion costs one forward instead of 50. Returns ``max_tokens`` (or len + 1 when the
    reference stopped at EOS and the cache also predicts EOS there) for an identical completion.
    """
    import torch

    from pion.client.runtimes.transformers_runtime import cache_forward_kwargs

    ids = torch.tensor([list(suffix) + list(reference)])
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=True, **cache_forward_kwargs(model, cache)).logits[0]
    predicted = torch.argmax(logits[len(suffix) - 1:], dim=-1).tolist()
    for j, token in enumerate(reference):
        if predicted[j] != token:
            return j
    if len(reference) < max_tokens:
        return len(reference) + 1 if predicted[len(reference)] in eos_ids else len(reference)
    return len(reference)
