"""Facts written differently read as one fact (issue 18, sixth round). For each spelling rule
in ``quantities.canonical`` / ``guard.check_structure``: two spellings of the same value pass
the numbers/dates checks in both directions, and a different value is still refused in both
directions. Hand-written examples (not rows of the evaluation data); no model needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pion.proxy import guard
from pion.proxy.quantities import canonical

ROOT = Path(__file__).resolve().parents[2]


def structure(query: str, cached: str) -> guard.GuardVerdict:
    return guard.check_structure(guard.extract(query), guard.extract(cached))


@pytest.mark.parametrize(("text", "expected"), [
    ("W-2", "w2"),
    ("401(k)", "401k"),
    ("form 1040-X", "form 1040x"),
    ("200°C", "c200"),
    ("200c", "c200"),
    ("200 degrees Celsius", "c200"),
    ("$500k", "usd500000"),
    ("1/4 cup", "0.25 cup"),
    ("a quarter cup", "0.25 cup"),
    ("half a cup", "0.5 cup"),
    ("1.5x", "x1.5"),
    ("time and a half", "x1.5"),
    ("one and a half times the rate", "x1.5 the rate"),
    ("4x8 foot", "ft4x8"),
    ("4 by 8 ft", "ft4x8"),
    ("four feet by eight feet", "ft4x8"),
    ("divide 10 by 2", "divide 10 by 2"),
    ("12 wk old", "s7257600 old"),
    ("a 14-night stay", "a s1209600 stay"),
    ("monthly", "permonth"),
    ("each month", "permonth"),
    ("month by month", "permonth"),
    ("18 hours a day", "s64800 perday"),
    ("for a week", "for a week"),
    ("a 7-year-old", "a yr7-old"),
    ("the 3rd of the month", "the 3rd"),
    ("tmrw", "tomorrow"),
    ("a meter reading", "a meter reading"),
    ("7 this evening", "t1900 today"),
])
def test_canonical_writes_each_new_spelling_one_way(text: str, expected: str) -> None:
    assert canonical(text) == expected


SAME = [
    ("rule: a currency sign on one side only", "Is the deductible $500?", "Is the deductible 500?"),
    ("rule: k thousands", "Can I deduct $2,000 of interest?", "can i deduct 2k of interest"),
    ("rule: k thousands with a currency", "Can I raise my limit to $500,000?", "Can I raise my limit to $500k?"),
    ("rule: k as kilometres", "What's a good 5 km time?", "What's a good 5K time?"),
    ("rule: rate words", "Can I pay monthly?", "Can I pay each month?"),
    ("rule: rate words", "Can I pay monthly?", "Can I pay month by month?"),
    ("rule: rate words", "How much should my cat eat daily?", "How much should my cat eat per day?"),
    ("rule: rate words", "How many rest days weekly?", "How many rest days a week?"),
    ("rule: form codes", "How do I import my W-2?", "how do i import my w2"),
    ("rule: form codes", "How do I edit my W-4?", "how do i edit my W4"),
    ("rule: form codes", "How do I join the 401(k)?", "How do I join the 401k?"),
    ("rule: a code letter on one side only", "How do I file a 1040-X?", "How do I file a 1040?"),
    ("rule: last as a verb", "How long does cooked rice last in the fridge?", "How long is cooked rice good in the fridge?"),
    ("rule: last as a verb", "How many shots does the X5 battery last?", "How many shots per X5 battery charge?"),
    ("rule: order within one kind", "What's the standard deduction for a single filer in 2025?",
     "What's the 2025 standard deduction if I file single?"),
    ("rule: order within one kind", "How long do I roast a 2 kg chicken at 190°C?",
     "At 190°C, how long does a 2 kg chicken need?"),
    ("rule: temperatures", "What is 200°C in Fahrenheit?", "200c in f?"),
    ("rule: temperatures", "What is 200°C in Fahrenheit?", "What is 200 degrees Celsius in Fahrenheit?"),
    ("rule: sizes", "How much compost for a 4x8 foot bed?", "How much compost for a 4 by 8 ft bed?"),
    ("rule: sizes", "How much compost for a 4x8 foot bed?", "How much compost for a four feet by eight feet bed?"),
    ("rule: fractions", "How many tablespoons are in 1/4 cup?", "How many tablespoons make a quarter cup?"),
    ("rule: multipliers", "Is overtime paid at 1.5x?", "Is overtime paid at time and a half?"),
    ("rule: multipliers", "Is overtime paid at 1.5x?", "Is overtime paid at one and a half times the normal rate?"),
    ("rule: a bare number in a unit its side names", "Is overtime paid for hours over 40?",
     "Is overtime paid for anything above 40 hours?"),
    ("rule: ages and durations", "Is it normal for a 12-week-old puppy to sleep 18 hours a day?",
     "12 wk old pup sleeps 18 hrs a day, ok?"),
    ("rule: a unit suffix on one side only", "What size print from a 24-megapixel photo?", "24mp photo max print size?"),
    ("rule: nights are days", "What's the price of two weeks of nights at a hotel?", "How much is a 14-night stay at a hotel?"),
    ("rule: clock time tonight is today", "Can I order for 7pm tonight?", "Can I order for 7pm today?"),
    ("rule: clock time tonight is today", "Can I order for 7pm tonight?", "Can I order for 7 this evening?"),
    ("rule: a year number names the year", "What is the standard deduction for tax year 2025?",
     "What is the standard deduction for 2025?"),
    ("rule: deictic days take no modifier", "How do I register a guest for tomorrow?",
     "How do I register a guest coming tomorrow?"),
    ("rule: this weekday is the weekday", "How much pasta for 12 people on Saturday?",
     "How much pasta for 12 people this Saturday?"),
    ("rule: falls is a verb", "When am I paid if payday is a holiday?", "When am I paid if payday falls on a holiday?"),
    ("rule: I am is no time", "How much protein per day at 70 kg?", "How much protein per day if I'm 70 kg?"),
]

DIFFERENT = [
    ("rule: a currency sign on one side only", "Is the deductible $500?", "Is the deductible 1,000?"),
    ("rule: a currency sign on one side only", "Is the deductible $500?", "Is the deductible €500?"),
    ("rule: k thousands", "Can I deduct $2,000 of interest?", "can i deduct 3k of interest"),
    ("rule: k as kilometres", "What's a good 5 km time?", "What's a good 10K time?"),
    ("rule: rate words", "Can I pay monthly?", "Can I pay weekly?"),
    ("rule: rate words", "Can I pay monthly?", "Can I pay this month?"),
    ("rule: form codes", "How do I import my W-2?", "How do I import my W-4?"),
    ("rule: form codes", "How do I join the 401(k)?", "How do I join the 403(b)?"),
    ("rule: last as a verb", "What did I order last week?", "What did I order next week?"),
    ("rule: last as a verb", "When is my last payment?", "When is my payment?"),
    ("rule: order within one kind", "Is there a room for 2 adults and 3 kids?", "Is there a room for 3 adults and 2 kids?"),
    ("rule: order within one kind", "What changed from 1.5 to 2.0?", "What changed from 2.0 to 1.5?"),
    ("rule: temperatures", "What is 200°C in Fahrenheit?", "What is 190°C in Fahrenheit?"),
    ("rule: temperatures", "What is 200°C in Fahrenheit?", "What is 200°F in Celsius?"),
    ("rule: weights", "How long do I roast a 2 kg chicken?", "How long do I roast a 3 kg chicken?"),
    ("rule: sizes", "How much compost for a 4x8 foot bed?", "How much compost for a 4x10 foot bed?"),
    ("rule: sizes", "How much compost for a 4x8 foot bed?", "How much compost for a 4x8 metre bed?"),
    ("rule: fractions", "How many tablespoons are in 1/4 cup?", "How many tablespoons are in 1/3 cup?"),
    ("rule: fractions", "How many tablespoons are in 1/4 cup?", "How many tablespoons are in half a cup?"),
    ("rule: multipliers", "Is overtime paid at 1.5x?", "Is overtime paid at 2x?"),
    ("rule: a bare number in a unit its side names", "How much for 2 nights?", "How much for two weeks?"),
    ("rule: ages and durations", "Is it normal for a 12-week-old puppy?", "Is it normal for a 12-month-old puppy?"),
    ("rule: nights are days", "How much is a 14-night stay?", "How much is a 7-night stay?"),
    ("rule: clock time tonight is today", "Can I order for 7pm tonight?", "Can I order for 7pm tomorrow?"),
    ("rule: this weekday is the weekday", "How much pasta for Saturday?", "How much pasta for next Saturday?"),
    ("rule: a number on one side only stays refused", "My dog threw up a couple of times, what should I do?",
     "My dog is vomiting, what should I do?"),
]


@pytest.mark.parametrize(("rule", "a", "b"), SAME)
def test_two_spellings_of_one_fact_pass_in_both_directions(rule: str, a: str, b: str) -> None:
    assert (rule, structure(a, b), structure(b, a)) == (rule, guard.GuardVerdict(True), guard.GuardVerdict(True))


@pytest.mark.parametrize(("rule", "a", "b"), DIFFERENT)
def test_a_different_value_is_still_refused_in_both_directions(rule: str, a: str, b: str) -> None:
    assert (rule, structure(a, b).ok, structure(b, a).ok) == (rule, False, False)


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("usd500", "500", True), ("500", "usd500", True), ("usd500", "eur500", False),
    ("w2", "2", True), ("w2", "w4", False), ("2k", "usd2000", True), ("2k", "usd3000", False),
    ("16s", "16", True), ("16s", "s16", False), ("ft4x8", "4x8", True), ("ft4x8", "m4x8", False),
    ("2.0", "2", True), ("s144000", "40", False),
])
def test_same_number_compares_tags_and_values(a: str, b: str, expected: bool) -> None:
    assert guard.same_number(a, b) is expected


def test_a_bare_number_is_another_units_amount_only_when_its_side_names_that_unit() -> None:
    assert (guard.same_number("40", "s144000", frozenset({"s"}), frozenset()),
            guard.same_number("40", "s144000", frozenset({"g"}), frozenset())) == (True, False)


@pytest.mark.parametrize("split", ["test4", "test5"])
def test_the_fact_spellings_benchmark_refuses_the_fresh_held_out_splits(split: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fact_spellings_eval.py"), "--splits", "dev", split],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (
        1, f"refusing splits ['{split}']: test4/test5 are held out for the lead; this tool reads only "
           "['train', 'dev', 'test', 'test2', 'test3']")
