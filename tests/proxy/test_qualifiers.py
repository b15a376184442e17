"""The scope reader (``pion.proxy.qualifiers``) and its place among the verifier's hard
checks, without processes. The sentences are written here, not taken from an evaluation
split, and every pair is tried in both directions."""

from __future__ import annotations

import pytest

from pion.proxy import qualifiers
from pion.proxy.qualifiers import Qualifier
from pion.proxy.verifier import Verdict, Verifier


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    v = Verifier()
    assert v.load() is True
    return v


def test_a_condition_clause_and_an_indefinite_phrase_are_qualifiers(verifier: Verifier) -> None:
    assert qualifiers.qualifiers("How do I pause my Velo plan if I travel for a month?", verifier.lexicon) == [
        Qualifier("if", ("travel", "month")), Qualifier("for a", ("month",))]


def test_a_definite_phrase_is_not_a_qualifier_but_an_audience_noun_is(verifier: Verifier) -> None:
    assert qualifiers.qualifiers("How do I pause the plan in the Velo app?", verifier.lexicon) == []
    assert qualifiers.qualifiers("How do I pause the Velo plan for my kids?", verifier.lexicon) == [
        Qualifier("for", ("kids",))]


def test_closed_class_qualifier_words_are_read() -> None:
    assert qualifiers.qualifiers("How do I list only the newest Velo rides?") == [
        Qualifier("only", ("only",)), Qualifier("newest", ("newest",))]


@pytest.mark.parametrize("cached, query", [
    ("How do I pause my Velo plan?", "How do I pause my Velo plan if I travel for a month?"),
    ("How do I pause my Velo plan?", "How do I pause my Velo plan as a student?"),
    ("How do I pause my Velo plan?", "How do I pause my Velo plan on a prepaid contract?"),
    ("How do I pause my Velo plan for a business account?", "How do I pause my Velo plan for a personal account?"),
    ("How do I list my Velo rides?", "How do I list my Velo rides in descending order?"),
    ("How do I list my Velo rides?", "How do I list only my Velo rides?"),
    ("Can I ride the Velo bikes?", "Can I ride the Velo bikes outside the city centre?"),
    ("Is the Velo helmet included?", "Is the Velo helmet included for international riders?"),
])
def test_a_qualifier_on_one_side_or_swapped_is_named_in_both_directions(
        verifier: Verifier, cached: str, query: str) -> None:
    assert qualifiers.differs(query, cached, verifier.lexicon) is not None
    assert qualifiers.differs(cached, query, verifier.lexicon) is not None


@pytest.mark.parametrize("cached, query", [
    ("How do I pause my Velo plan in the app?", "What's the way to pause my Velo plan?"),
    ("How do I give someone access to my Velo account?", "How do I make my Velo account available to a colleague?"),
    ("How do I share my Velo ride with a friend?", "How can I let another person see my Velo ride?"),
    ("How do I download all my Velo data?", "How do I export every bit of my Velo data?"),
    ("How do I pause my Velo plan as a student?", "How do I pause my Velo plan as a pupil?"),
    ("What does Velo charge if I return the bike late?", "What's the late fee if I return a Velo bike late?"),
])
def test_paraphrases_that_reword_or_keep_their_qualifiers_pass(verifier: Verifier, cached: str, query: str) -> None:
    assert qualifiers.differs(query, cached, verifier.lexicon) is None
    assert qualifiers.differs(cached, query, verifier.lexicon) is None


def test_the_verifier_refuses_an_added_qualifier_with_reason_scope(verifier: Verifier) -> None:
    v = verifier.hard_check("How do I pause my Velo plan as a student?", "How do I pause my Velo plan?")
    assert (v.ok, v.reason, v.stage) == (False, "scope", "guard")
    assert v.detail == "scope: 'as a student' on one side only (student)"
    assert verifier.hard_check("How do I pause my Velo plan?", "How can I pause my Velo plan?") == Verdict(True)


def test_the_readers_can_be_switched_off_to_measure_them(verifier: Verifier) -> None:
    off = Verifier(lexicon=verifier.lexicon, readers=False)
    assert off.hard_check("How do I pause my Velo plan as a student?", "How do I pause my Velo plan?") \
        == Verdict(True)
