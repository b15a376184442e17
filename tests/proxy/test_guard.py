"""The guard refuses near-identical questions whose answers differ, and lets paraphrases through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pion.proxy.guard import check, extract

PAIRS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "semantic_pairs.jsonl"


@pytest.mark.parametrize("cached, query, reason", [
    ("What is the status of order 48213?", "What is the status of order 48231?", "numbers differ"),
    ("Can I take two pills at once?", "Can I take three pills at once?", "numbers differ"),
    ("Which episode is season 3 episode 4?", "Which episode is season 4 episode 3?", "numbers in another order"),
    ("Is the event on March 3 sold out?", "Is the event on March 4 sold out?", "numbers differ"),
    ("What were the sales in January?", "What were the sales in February?", "dates/times differ"),
    ("What are the opening hours this weekend?", "What are the opening hours next weekend?", "dates/times differ"),
    ("Is there a train at 9 am?", "Is there a train at 9 pm?", "dates/times differ"),
    ("Is this mushroom safe to eat?", "Is this mushroom unsafe to eat?", "negation differs"),
    ("Which plans include phone support?", "Which plans do not include phone support?", "negation differs"),
    ("Can I take ibuprofen with alcohol?", "Why can't I take ibuprofen with alcohol?", "negation differs"),
    ("Is the restaurant open on holidays?", "Is the restaurant closed on holidays?", "negation differs"),
    ("What is the capital of France?", "What is the capital of Germany?", "content words differ"),
    ("How do I install numpy?", "How do I install numpy on Windows?", "one question adds"),
])
def test_trap_is_refused_with_the_reason(cached: str, query: str, reason: str) -> None:
    verdict = check(query, cached)
    assert verdict.ok is False
    assert verdict.reason.startswith(reason)


@pytest.mark.parametrize("cached, query", [
    ("How do I reset my password?", "How can I reset my password?"),
    ("What is the capital of France?", "Tell me the capital city of France."),
    ("What is the status of order 48213?", "what's the status of order 48,213"),
    ("When is the tax filing deadline in 2025?", "What is the deadline for filing taxes in 2025?"),
    ("Do you ship internationally?", "Do you ship internationally??"),
    ("How much does it cost to ship 5 kg?", "How much does it cost to ship five kg?"),
])
def test_paraphrase_passes(cached: str, query: str) -> None:
    assert check(query, cached).ok is True


def test_extract_reads_numbers_times_negations_and_content() -> None:
    facts = extract("Why didn't order 1,200 arrive on the 3rd of May last week?")
    assert facts.numbers == ("1200", "3")
    assert facts.times == frozenset({"may", "last:week"})
    assert facts.negations == 1
    assert facts.content == frozenset({"order", "arrive"})


def test_guard_is_symmetric_on_the_dev_set() -> None:
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines()]
    assert len(pairs) >= 300
    assert [check(p["a"], p["b"]).ok for p in pairs] == [check(p["b"], p["a"]).ok for p in pairs]
