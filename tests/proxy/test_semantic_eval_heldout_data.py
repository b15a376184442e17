"""The L1 evaluation set's held-out splits ``test2``, ``test3``, … (issue 18) are well formed.

Why: a scorer reads these files as the final, never-tuned-on measure of the L1 verifier, so a
malformed row, a lost category or a duplicated pair would silently change the figure it reports.
Every check runs once per split. No model is loaded: these checks read the JSONL files only.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
# Every held-out split whose seeds file exists (the builder knows the names; a split joins
# these checks the moment its seeds are committed).
KNOWN_SPLITS = ("test2", "test3", "test4", "test5")
SPLITS = tuple(s for s in KNOWN_SPLITS if (BENCH / f"semantic_eval_{s}_seeds.py").exists())
FIRST_SET = BENCH / "data" / "semantic_eval_pairs.jsonl"
TRAPS = ("entity_swap", "negation", "numbers_dates", "scope_change")
PAIR_KEYS = ["id", "split", "domain", "intent", "category", "a", "b"]
CONVERSATION_KEYS = ["id", "split", "domain", "category", "a", "b"]


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def pairs_file(split: str) -> Path:
    return BENCH / "data" / f"semantic_eval_{split}_pairs.jsonl"


def conversations_file(split: str) -> Path:
    return BENCH / "data" / f"semantic_eval_{split}_conversations.jsonl"


@pytest.fixture(scope="module", params=SPLITS)
def split(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def pairs(split: str) -> list[dict[str, Any]]:
    return read(pairs_file(split))


@pytest.fixture(scope="module")
def conversations(split: str) -> list[dict[str, Any]]:
    return read(conversations_file(split))


def test_every_pair_row_has_exactly_the_first_sets_keys_in_order(pairs: list[dict[str, Any]]) -> None:
    assert [list(row) for row in pairs] == [PAIR_KEYS] * len(pairs)
    assert list(read(FIRST_SET)[0]) == PAIR_KEYS


def test_pair_ids_count_up_from_one_and_every_row_is_in_its_split(
        split: str, pairs: list[dict[str, Any]]) -> None:
    assert [row["id"] for row in pairs] == list(range(1, len(pairs) + 1))
    assert {row["split"] for row in pairs} == {split}


def test_there_are_at_least_400_pairs_and_about_55_percent_are_paraphrases(pairs: list[dict[str, Any]]) -> None:
    counts = Counter(row["category"] for row in pairs)
    assert len(pairs) >= 400
    assert set(counts) == {"paraphrase", *TRAPS}
    assert 0.50 <= counts["paraphrase"] / len(pairs) <= 0.60


def test_each_kind_of_trap_has_at_least_35_pairs(pairs: list[dict[str, Any]]) -> None:
    counts = Counter(row["category"] for row in pairs)
    assert [kind for kind in TRAPS if counts[kind] < 35] == []


def test_pair_texts_are_non_empty_strings_and_a_differs_from_b(pairs: list[dict[str, Any]]) -> None:
    bad = [row["id"] for row in pairs
           if not all(isinstance(row[k], str) and row[k].strip() for k in ("domain", "intent", "a", "b"))
           or row["a"] == row["b"]]
    assert bad == []


def test_no_pair_is_repeated(pairs: list[dict[str, Any]]) -> None:
    repeated = [k for k, n in Counter((row["a"], row["b"]) for row in pairs).items() if n > 1]
    assert repeated == []


def test_intents_belong_to_their_rows_domain(pairs: list[dict[str, Any]]) -> None:
    assert [row["id"] for row in pairs if row["intent"].split("/")[0] != row["domain"]] == []


def test_the_split_uses_at_least_eight_domains_none_of_them_from_the_first_set(
        pairs: list[dict[str, Any]], conversations: list[dict[str, Any]]) -> None:
    domains = {row["domain"] for row in pairs}
    first = {row["domain"] for row in read(FIRST_SET)}
    assert len(domains) >= 8
    assert domains & first == set()
    assert {row["domain"] for row in conversations} <= domains


def test_no_question_of_the_first_set_is_reused(pairs: list[dict[str, Any]]) -> None:
    first = {text for row in read(FIRST_SET) for text in (row["a"], row["b"])}
    assert [row["id"] for row in pairs if row["a"] in first or row["b"] in first] == []


def test_every_conversation_row_has_the_first_sets_schema_and_its_split(
        split: str, conversations: list[dict[str, Any]]) -> None:
    assert [list(row) for row in conversations] == [CONVERSATION_KEYS] * len(conversations)
    assert [row["id"] for row in conversations] == list(range(1, len(conversations) + 1))
    assert {row["split"] for row in conversations} == {split}


def test_there_are_at_least_80_conversations_about_half_of_each_category(
        conversations: list[dict[str, Any]]) -> None:
    counts = Counter(row["category"] for row in conversations)
    assert len(conversations) >= 80
    assert set(counts) == {"paraphrase", "other_context"}
    assert 0.40 <= counts["paraphrase"] / len(conversations) <= 0.60


def test_every_conversation_alternates_user_and_assistant_and_ends_on_a_user_turn(
        conversations: list[dict[str, Any]]) -> None:
    bad = []
    for row in conversations:
        for side in ("a", "b"):
            messages = row[side]
            roles = [m["role"] for m in messages]
            expected = ["user" if k % 2 == 0 else "assistant" for k in range(len(messages))]
            if (roles != expected or roles[-1] != "user" or len(messages) < 3
                    or any(list(m) != ["role", "content"] or not m["content"].strip() for m in messages)):
                bad.append((row["id"], side))
    assert bad == []


def test_no_conversation_pair_is_repeated_and_the_two_sides_differ(conversations: list[dict[str, Any]]) -> None:
    keys = [json.dumps([row["a"], row["b"]]) for row in conversations]
    assert len(set(keys)) == len(keys)
    assert [row["id"] for row in conversations if row["a"] == row["b"]] == []


def test_other_context_rows_change_the_context_not_only_the_follow_up(
        conversations: list[dict[str, Any]]) -> None:
    same_context = [row["id"] for row in conversations
                    if row["category"] == "other_context" and row["a"][:-1] == row["b"][:-1]]
    assert same_context == []


def test_the_files_are_exactly_what_the_builder_writes_from_the_seeds(split: str) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import make_semantic_eval_heldout as builder
    finally:
        sys.path.remove(str(BENCH))
    assert read(pairs_file(split)) == builder.pair_rows(split)
    assert read(conversations_file(split)) == builder.conversation_rows(split)


def test_the_test2_builder_command_still_writes_what_the_shared_builder_writes() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import make_semantic_eval_heldout as builder
        import make_semantic_eval_test2 as test2_builder
    finally:
        sys.path.remove(str(BENCH))
    assert test2_builder.pair_rows() == builder.pair_rows("test2")
    assert test2_builder.conversation_rows() == builder.conversation_rows("test2")
    assert (test2_builder.PAIRS_OUT, test2_builder.CONV_OUT) == (pairs_file("test2"), conversations_file("test2"))


def test_no_two_held_out_splits_share_a_domain_or_a_question() -> None:
    rows = {split: read(pairs_file(split)) for split in SPLITS}
    rows["first set"] = read(FIRST_SET)
    clashes = []
    for one, two in itertools.combinations(rows, 2):
        domains = {row["domain"] for row in rows[one]} & {row["domain"] for row in rows[two]}
        seen = {text for row in rows[one] for text in (row["a"], row["b"])}
        questions = [row["id"] for row in rows[two] if row["a"] in seen or row["b"] in seen]
        if domains or questions:
            clashes.append((one, two, sorted(domains), questions))
    assert clashes == []


@pytest.mark.parametrize("later_split", [s for s in SPLITS if s != "test2"])
def test_every_split_after_test2_has_at_least_ten_domains_each_with_paraphrases_and_traps(
        later_split: str) -> None:
    by_domain: dict[str, Counter[str]] = {}
    for row in read(pairs_file(later_split)):
        by_domain.setdefault(row["domain"], Counter())[row["category"]] += 1
    assert len(by_domain) >= 10
    assert [d for d, counts in by_domain.items()
            if counts["paraphrase"] == 0 or sum(counts.values()) == counts["paraphrase"]] == []
