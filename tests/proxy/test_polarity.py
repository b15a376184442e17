"""The polarity reader (``pion.proxy.polarity``) and its place among the verifier's hard
checks, without processes. The sentences are written here, not taken from an evaluation
split, and every pair is tried in both directions."""

from __future__ import annotations

import pytest

from pion.proxy import polarity
from pion.proxy.verifier import Verdict, Verifier


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    v = Verifier()
    assert v.load() is True
    return v


def test_a_prepositional_cue_negates_the_phrase_after_it() -> None:
    assert polarity.read("Is the Orbit card free of any monthly fee?").words == (
        ("orbit", False), ("card", False), ("monthly", True), ("fee", True))


def test_a_verb_negator_negates_the_next_content_word_only() -> None:
    assert polarity.read("I can't open the Lumen app on my tablet").words == (
        ("open", True), ("lumen", False), ("app", False), ("tablet", False))


def test_a_reverser_negates_the_verb_it_governs_and_a_plain_stop_is_an_action() -> None:
    assert polarity.read("How do I stop Lumen from syncing photos?").words == (
        ("lumen", False), ("syncing", True), ("photos", False))
    assert polarity.read("How do I stop my Lumen plan?").words == (("lumen", False), ("plan", False))


def test_a_negated_reverser_cancels_out() -> None:
    reading = polarity.read("Why won't the Lumen kettle stop beeping?")
    assert (reading.words, reading.strong, reading.weak) == (
        (("lumen", False), ("kettle", False), ("beeping", False)), 1, 1)


@pytest.mark.parametrize("cached, query", [
    ("How do I pay the Orbit invoice by card?", "How do I pay the Orbit invoice by bank transfer instead of card?"),
    ("Is the Orbit card free of any monthly fee?", "What is the monthly fee on the Orbit card?"),
    ("How do I e-sign the Orbit lease?", "Can I sign the Orbit lease on paper rather than e-signing it?"),
    ("How do I make the Lumen app play videos?", "How do I stop the Lumen app from playing videos?"),
    ("Why am I unable to reach the Orbit portal?", "How do I reach the Orbit portal?"),
    ("How do I undo a merge in Quill?", "How do I redo a merge in Quill?"),
    ("How do I mark a Quill device as trusted?", "How do I mark a Quill device as distrusted?"),
])
def test_opposite_polarity_is_named_in_both_directions(verifier: Verifier, cached: str, query: str) -> None:
    assert polarity.differs(query, cached, verifier.lexicon) is not None
    assert polarity.differs(cached, query, verifier.lexicon) is not None


@pytest.mark.parametrize("cached, query", [
    ("I can't log in to Orbit, what should I do?", "I'm unable to sign in to Orbit, what should I do?"),
    ("Why did my Orbit payment fail?", "Why did my Orbit payment not go through?"),
    ("What can I use instead of butter in shortbread?", "What's a good butter substitute for shortbread?"),
    ("How do I keep the Lumen lamp from flickering?", "How do I stop the Lumen lamp flickering?"),
    ("Why won't my Lumen kettle stop beeping?", "My Lumen kettle keeps beeping, why?"),
    ("What ISO should I use indoors without flash?", "Recommended ISO for shooting indoors with no flash?"),
    ("How do I reset my Orbit password?", "What's the way to change my Orbit password?"),
])
def test_the_same_polarity_in_other_words_is_not_a_difference(verifier: Verifier, cached: str, query: str) -> None:
    assert polarity.differs(query, cached, verifier.lexicon) is None
    assert polarity.differs(cached, query, verifier.lexicon) is None


def test_a_failure_word_lifts_the_guards_count_of_a_not(verifier: Verifier) -> None:
    assert verifier.hard_check("Why did my Orbit payment not go through?", "Why did my Orbit payment fail?") \
        == Verdict(True)
    assert verifier.hard_check("I can't log in to Orbit", "I am unable to sign in to Orbit") == Verdict(True)
    off = Verifier(lexicon=verifier.lexicon, readers=False)
    assert off.hard_check("Why did my Orbit payment not go through?", "Why did my Orbit payment fail?") \
        == Verdict(False, "negation", "negation differs")


def test_two_cues_against_none_are_not_lifted(verifier: Verifier) -> None:
    v = verifier.hard_check("How do I get my Orbit payslip if I no longer work there and can't log in?",
                            "How do I get my Orbit payslip?")
    assert (v.ok, v.reason) == (False, "negation")


def test_the_verifier_refuses_a_flipped_request_with_reason_polarity(verifier: Verifier) -> None:
    v = verifier.hard_check("How do I get a paper check instead of direct deposit from Orbit?",
                            "How do I set up direct deposit from Orbit?")
    assert (v.ok, v.reason, v.stage) == (False, "polarity", "guard")
    assert v.detail == "polarity: 'direct' negated on one side only"


@pytest.mark.parametrize("cached, query", [
    ("How do I convert a text column to dates in Tabula?", "How do I convert a date column to text in Tabula?"),
    ("Can I substitute honey for sugar in flapjacks?", "Can I substitute sugar for honey in flapjacks?"),
])
def test_the_same_words_in_reversed_roles_are_named_in_both_directions(cached: str, query: str) -> None:
    assert polarity.swapped_roles(query, cached) is not None
    assert polarity.swapped_roles(cached, query) is not None


def test_words_moving_one_way_only_are_not_a_role_swap() -> None:
    assert polarity.swapped_roles("How do I send money to Ada from my Orbit account?",
                                  "How do I send money from my Orbit account to Ada?") is None
    assert polarity.swapped_roles("How do I convert a text column to dates?",
                                  "How do I turn a text column into dates?") is None
