"""The aligned verifier (``--verifier aligned``) and its WordNet lexicon, without processes.

Examples are written here, not taken from the evaluation set's test split."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pion.proxy import guard
from pion.proxy.lexicon import WordNetLexicon, wordnet_dir
from pion.proxy.verifier import REASONS, Alignment, Verdict, Verifier, VerifierParams, from_guard

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    v = Verifier()
    assert v.load() is True
    return v


def test_wordnet_ships_in_the_installed_package() -> None:
    root = wordnet_dir()
    assert root is not None
    assert sorted(p.name for p in root.glob("index.*") if p.name != "index.sense") == \
        ["index.adj", "index.adv", "index.noun", "index.verb"]


def test_lexicon_knows_synonyms_relatives_antonyms_and_irregular_forms(verifier: Verifier) -> None:
    lex = verifier.lexicon
    assert (lex.synonyms("picture", "photo"), lex.related("transfer", "send"), lex.related("sending", "transferred")) \
        == (True, True, True)
    assert (lex.antonyms("increase", "decrease"), lex.antonyms("enable", "disable")) == (True, True)
    assert (lex.related("france", "germany"), lex.synonyms("python", "java")) == (False, False)
    assert lex.lemmas("sent") >= {"send"}


def test_lexicon_without_its_files_reports_not_loaded(tmp_path: Path) -> None:
    lex = WordNetLexicon(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        lex.load()
    assert lex.loaded is False


@pytest.mark.parametrize("cached, query", [
    ("How do I change my profile picture?", "How can I update my profile photo?"),
    ("How do I transfer money to my son?", "How can I send money to my son?"),
    ("Where is my order 5512?", "where's my order 5,512"),
])
def test_synonym_paraphrases_align_through_wordnet(verifier: Verifier, cached: str, query: str) -> None:
    assert verifier.align(query, cached) == Alignment((), ())
    assert verifier.check(query, cached, 0.8) == Verdict(True)


@pytest.mark.parametrize("cached, query, reason", [
    ("What is the status of order 48213?", "What is the status of order 48231?", "numbers"),
    ("Is the pool open on Sunday?", "Is the pool open on Monday?", "dates"),
    ("How do I increase my limit?", "How do I decrease my limit?", "negation"),
    ("Can I pay with a card?", "Why can't I pay with a card?", "negation"),
    ("How do I get from the station to the stadium?", "How do I get from the stadium to the station?", "negation"),
    ("How do I cancel my Flixora plan?", "How do I cancel my Streamly plan?", "entity"),
])
def test_hard_checks_refuse_traps_with_their_reason(verifier: Verifier, cached: str, query: str, reason: str) -> None:
    verdict = verifier.check(query, cached, 0.95)
    assert (verdict.ok, verdict.reason, verdict.stage) == (False, reason, "guard")


def test_a_question_that_adds_a_scope_is_refused_by_the_verifier(verifier: Verifier) -> None:
    verdict = verifier.check("How do I install numpy on my laptop?", "How do I install numpy?", 0.93)
    assert (verdict.ok, verdict.reason, verdict.stage) == (False, "added_words", "verifier")
    # An added qualifier phrase is now a hard refusal of the scope reader (sixth round).
    verdict = verifier.check("How do I install numpy on a laptop?", "How do I install numpy?", 0.93)
    assert (verdict.ok, verdict.reason, verdict.stage) == (False, "scope", "guard")


def test_swapped_words_are_served_only_above_the_swap_similarity(verifier: Verifier) -> None:
    cached, query = "How do I reset the router?", "How can I reboot the router?"
    assert verifier.align(query, cached) == Alignment(("reboot",), ("reset",))
    params = verifier.params
    assert verifier.check(query, cached, params.swap_similarity + 0.01) == Verdict(True)
    low = verifier.check(query, cached, params.swap_similarity - 0.01)
    assert (low.ok, low.reason, low.stage) == (False, "swapped_words", "verifier")


def test_more_swapped_words_than_allowed_are_refused(verifier: Verifier) -> None:
    strict = Verifier(VerifierParams(max_swapped=1, swap_similarity=0.7), verifier.lexicon)
    verdict = strict.check("How can I reboot the router?", "How do I reset the router?", 0.9)
    assert (verdict.ok, verdict.reason) == (False, "swapped_words")


def test_the_guard_verdict_maps_onto_the_same_reasons() -> None:
    cases = [("What is order 1?", "What is order 2?"), ("Open on Monday?", "Open on Sunday?"),
             ("Is it safe?", "Is it unsafe?"), ("How do I install numpy?", "How do I install numpy on Windows?"),
             ("What is the capital of France?", "What is the capital of Germany?")]
    verdicts = [from_guard(guard.check(q, c)) for c, q in cases]
    assert [(v.ok, v.reason, v.stage) for v in verdicts] == [
        (False, "numbers", "guard"), (False, "dates", "guard"), (False, "negation", "guard"),
        (False, "added_words", "guard"), (False, "swapped_words", "guard")]
    assert {v.reason for v in verdicts} <= set(REASONS)


def test_eval_set_is_large_split_by_domain_family_and_covers_every_trap_kind() -> None:
    pairs = [json.loads(line) for line in (DATA / "semantic_eval_pairs.jsonl").read_text().splitlines()]
    convs = [json.loads(line) for line in (DATA / "semantic_eval_conversations.jsonl").read_text().splitlines()]
    assert (len(pairs) >= 1000, len(convs) >= 200) == (True, True)
    domains = {split: {p["domain"] for p in pairs if p["split"] == split} for split in ("train", "dev", "test")}
    assert domains["train"] & domains["test"] == set()
    assert domains["dev"] & domains["test"] == set()
    cats = Counter((p["split"], p["category"]) for p in pairs)
    for split in ("train", "dev", "test"):
        assert {c for s, c in cats if s == split} == {"paraphrase", "entity_swap", "negation", "numbers_dates",
                                                      "scope_change"}
    assert {c["category"] for c in convs} == {"paraphrase", "other_context"}


@pytest.mark.parametrize("cached, query", [
    ("I'm moving house, how do I tell Vantor?", "how do i tell vantor about my house move"),
    ("What are Quellby's opening hours on Sundays?", "quellby sunday hours"),
    ("How do I cancel my Vantor membership online?", "Can I end my Vantor Gym membership on the website?"),
    ("What time does the Orrin Library open?", "When does the Orrin library open?"),
    ("I want a heat pump for my flat What's the price?", "I'm planning a heat pump for my flat Yes please How much is it?"),
    ("I ordered from Quellby an hour ago can I cancel?", "My Quellby order was an hour ago This is too slow Am I able to cancel?"),
])
def test_names_written_differently_or_with_their_kind_beside_them_are_one_name(
        verifier: Verifier, cached: str, query: str) -> None:
    assert verifier.hard_check(query, cached) == Verdict(True)


@pytest.mark.parametrize("cached, query", [
    ("How do I cancel my Vantor membership online?", "How do I cancel my Vantor Max membership online?"),
    ("What time does Quellby open?", "What time does the Quellby Library in Dunmore open?"),
    ("Can I bring a guest to Vantor?", "Can I bring a guest to Orrin?"),
])
def test_a_name_the_other_question_lacks_still_refuses_unless_it_is_the_places_kind(
        verifier: Verifier, cached: str, query: str) -> None:
    assert (verifier.hard_check(query, cached).ok, verifier.hard_check(query, cached).reason) == (False, "entity")
