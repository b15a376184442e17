"""Prompts the client tests share: SmolLM2-Instruct chat turns."""

from __future__ import annotations

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
