"""Opposite actions (``pion.proxy.opposites``) and their place among the verifier's hard
checks, without processes. Examples are written here, not taken from the evaluation set."""

from __future__ import annotations

import pytest

from pion.proxy.opposites import actions, opposite_actions, prefix_opposites
from pion.proxy.verifier import Verdict, Verifier


def test_a_phrasal_verb_takes_its_direction_from_the_particle() -> None:
    assert actions("How do I turn the porch light on?").words == (("turn_on", 1),)
    assert actions("How do I turn the porch light off?").words == (("turn_off", -1),)


def test_a_stop_operator_reverses_the_action_it_governs() -> None:
    assert actions("How do I stop Zentro from muting people?").words == (("stop muting", 1),)
    assert actions("How do I stop my Zentro plan?").words == (("stop", -1),)


def test_a_participle_after_a_determiner_is_a_state_not_the_action_asked_for() -> None:
    assert actions("How do I find a deleted Zentro message?").words == ()
    assert actions("How do I find a Zentro message I deleted?").words == (("deleted", -1),)


@pytest.mark.parametrize("cached, query", [
    ("How do I switch on dark mode in Zentro?", "How do I turn dark mode off in Zentro?"),
    ("How can I activate the kiosk mode on my tablet?", "Where do I switch off kiosk mode on my tablet?"),
    ("How do I put the yoga class on my calendar?", "How do I take the yoga class off my calendar?"),
    ("How do I invite a guest to the Zentro channel?", "How can I remove a guest from the Zentro channel?"),
    ("How do I pin a message in Zentro?", "How do I stop Zentro from pinning messages?"),
    ("How can I raise the volume limit on the speaker?", "How do I lower the volume limit on the speaker?"),
    ("How do I enable the hotspot on my tablet?", "How do I keep my tablet from enabling the hotspot?"),
    ("How do I encode a video for the Zentro player?", "How do I decode a video for the Zentro player?"),
    ("Is the red kettle in stock?", "Is the red kettle out of stock?"),
    ("How do I give my sister access to the calendar?", "How do I take away my sister's access to the calendar?"),
])
def test_opposite_requests_are_named(cached: str, query: str) -> None:
    found = opposite_actions(query, cached)
    assert (found is not None, (found or "").startswith("opposite actions: ")) == (True, True)


@pytest.mark.parametrize("cached, query", [
    ("How do I switch on dark mode in Zentro?", "How can I enable dark mode in Zentro?"),
    ("How do I cancel my Zentro plan?", "I want to stop my Zentro plan, how?"),
    ("How do I restore a deleted Zentro chat?", "How can I get back a removed Zentro chat?"),
    ("How do I delete my Zentro account?", "How can I remove my Zentro account for good?"),
    ("What does Zentro cost per month?", "How much is Zentro a month?"),
    ("How do I copy my notes out of Zentro?", "How do I export the notes I have in Zentro?"),
    ("How do I keep my streak in Zentro?", "How can I hold on to my Zentro streak?"),
])
def test_requests_in_the_same_direction_or_without_one_are_left_alone(cached: str, query: str) -> None:
    assert opposite_actions(query, cached) is None


def test_opposed_prefixes_need_the_same_stem_of_three_letters_or_more() -> None:
    assert [prefix_opposites(a, b) for a, b in (("encrypt", "decrypt"), ("upload", "download"), ("mute", "unmute"),
                                                ("include", "exclude"), ("do", "undo"), ("install", "instruct"))] \
        == [True, True, True, True, False, False]


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    v = Verifier()
    assert v.load() is True
    return v


def test_the_verifier_refuses_opposite_actions_as_negation_before_any_score(verifier: Verifier) -> None:
    v = verifier.hard_check("Where do I switch off dark mode in Zentro?", "How can I activate dark mode in Zentro?")
    assert (v.ok, v.reason, v.stage) == (False, "negation", "guard")
    assert v.detail == "opposite actions: ['switch_off'] vs ['activate']"
    assert verifier.hard_check("How can I enable dark mode in Zentro?", "How do I switch on dark mode in Zentro?") \
        == Verdict(True)
