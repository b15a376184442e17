"""The "do not serve a wrong answer" check that runs after a similarity hit.

Cosine on MiniLM cannot tell "order 48213" from "order 48231" (0.95) or "safe" from
"unsafe" (0.98): the sentences differ in one token that decides the answer. So a cache
hit is served only when the new question and the cached one also agree on

  1. numbers (digits, number words, ordinals, codes such as E42 or 12A),
  2. dates and times (months, weekdays, years, today/tomorrow, this/next week, am/pm),
  3. negation (not / no / never / without / n't, and un-/in-/dis-/non- antonyms),
  4. distinctive content words: after dropping function words and filler, every content
     word of one question must match (same stem or listed synonym) a word of the other.
     A word swapped for another (France/Germany, Python/Java) or added (numpy / numpy on
     Windows) makes them different questions.

It is deliberately conservative: a refused hit costs one backend call, a wrong hit
serves someone else's answer. Measured by ``benchmarks/semantic_cache_eval.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from pion.proxy.quantities import UNIT_FACTORS, UNIT_TAGS, canonical

_CONTRACTIONS = [
    (r"\bcan't\b", "can not"), (r"\bwon't\b", "will not"), (r"\bshan't\b", "shall not"),
    (r"n't\b", " not"), (r"'re\b", " are"), (r"'ve\b", " have"), (r"'ll\b", " will"),
    (r"'d\b", " would"), (r"'m\b", " am"), (r"\bcannot\b", "can not"), (r"'s\b", ""),
]
_TOKEN = re.compile(r"[a-z0-9]+(?:[.][0-9]+)*")

_NEGATORS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor",
                       "without", "nowhere"})
_NEG_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non")
_ANTONYM_WORDS = [
    ("open", "closed"), ("open", "close"), ("enable", "disable"), ("positive", "negative"),
    ("include", "exclude"), ("allow", "forbid"), ("accept", "reject"), ("increase", "decrease"),
    ("before", "after"), ("more", "less"), ("maximum", "minimum"), ("max", "min"),
    ("high", "low"), ("early", "late"), ("buy", "sell"), ("add", "remove"), ("win", "lose"),
    ("upload", "download"), ("import", "export"), ("true", "false"), ("on", "off"),
    ("connect", "disconnect"), ("lock", "unlock"), ("start", "stop"), ("arrive", "depart"),
]

_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "thirteen": "13", "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17",
    "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40",
    "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90",
    "hundred": "100", "thousand": "1000", "million": "1e6", "billion": "1e9",
    "dozen": "12", "half": "0.5", "twice": "x2", "double": "x2", "triple": "x3",
    "single": "1", "both": "2",
}
_ORDINALS = {"first": "1", "second": "2", "third": "3", "fourth": "4", "fifth": "5",
             "sixth": "6", "seventh": "7", "eighth": "8", "ninth": "9", "tenth": "10",
             "last": "last"}
_ORDINAL_DIGITS = re.compile(r"^(\d+)(st|nd|rd|th)$")
_CANONICAL_TIME = re.compile(r"^t\d{4}$")  # quantities.canonical: t2200 is 10 pm / 22:00

_MONTHS = {
    "january": "jan", "jan": "jan", "february": "feb", "feb": "feb", "march": "mar",
    "april": "apr", "apr": "apr", "june": "jun", "july": "jul", "august": "aug",
    "aug": "aug", "september": "sep", "sept": "sep", "october": "oct", "oct": "oct",
    "november": "nov", "nov": "nov", "december": "dec", "dec": "dec",
}
_TIME_WORDS = frozenset({
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
    "today", "tomorrow", "yesterday", "tonight", "morning", "afternoon", "evening", "night",
    "noon", "midnight", "weekend", "weekday", "week", "month", "year", "quarter", "decade",
    "century", "spring", "summer", "autumn", "fall", "winter", "now", "currently",
    "recently", "daily", "weekly", "monthly", "yearly", "annually", "holiday", "holidays",
    "perhour", "perday", "perweek", "permonth", "peryear",  # quantities.canonical: "monthly" / "each month"
})
_TIME_MODIFIERS = frozenset({"this", "next", "last", "past", "previous", "coming", "current"})

# Function words and request framing: their presence never changes which answer fits.
_STOPWORDS = frozenset("""
a an the i me my mine myself we us our ours you your yours it its they them their he she him
her his is are was were be been being am do does did doing done have has had having can could
would should will shall may might must what which who whom whose where when why how that this
these those there here of to for in on at by with from into onto about as and or but if so than
then some any get got let please tell explain give show know want like wanted would help hi hello
hey thanks thank ok okay just also really actually exactly still yet way ways best good simple
terms overview possible possibly kind sort type anyone someone something anything use using
used go going make sure need does quick quickly fastest whether about again currently there's
is it what's whats im id r ur u pls plz via per each every between up much many happen
""".split())
# Words a paraphrase adds without changing the question (one-sided only).
_FILLER = frozenset("""
city current currently still yet any new past step steps tip tips way ways recipe
time long much many amount number people
""".split())
_SYNONYMS = [
    {"change", "update", "modify", "edit"}, {"cost", "price", "pricing", "fee", "charge"},
    {"quick", "fast", "rapid", "speed"}, {"buy", "purchase", "order"}, {"contact", "reach"},
    {"see", "view", "find", "check", "look"}, {"refund", "money"}, {"cancel", "terminate"},
    {"start", "begin"}, {"big", "large", "bigger", "larger", "biggest", "largest"},
    {"author", "write", "wrote", "written"}, {"paint", "painter", "painted"},
    {"delete", "remove"}, {"request", "apply", "ask"}, {"create", "make", "build"},
    {"fix", "repair", "solve"}, {"reduce", "lower"}, {"turn", "enable"},
    {"leaking", "leaky", "leak"}, {"fresh", "good"}, {"run", "runs", "ceo"},
    {"store", "keep"}, {"drain", "draining"}, {"frequent", "frequently", "often"},
    {"last", "shelf"}, {"sci", "science", "fiction", "scifi"}, {"stand", "short"},
    {"reason", "cause", "causes", "make", "makes"}, {"live", "population", "people"},
    {"stop", "rid"}, {"past", "history", "previous"}, {"say", "translate"},
    {"different", "difference", "differ"}, {"download", "get"}, {"tall", "tallest"},
]
_SYNONYM_OF: dict[str, int] = {w: i for i, group in enumerate(_SYNONYMS) for w in group}


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    """Whether a similarity hit may be served, and why not."""

    ok: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class QuestionFacts:
    """What the guard compares, extracted once per question."""

    numbers: tuple[str, ...]
    times: frozenset[str]
    negations: int
    content: frozenset[str]
    units: frozenset[str] = frozenset()  # base tags of unit words written without an amount ("hours")


def _tokens(text: str) -> list[str]:
    text = canonical(text)  # one spelling per number, amount, time and date
    for pattern, repl in _CONTRACTIONS:
        text = re.sub(pattern, repl, text)
    return _TOKEN.findall(text)


def _stem(word: str) -> str:
    if word.endswith(("ss", "us", "is", "eed")):
        return word
    for suffix, repl in (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""),
                         ("ly", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "es" and not word.endswith(("ses", "xes", "zes", "ches", "shes")):
                continue
            stem = word[: -len(suffix)] + repl
            if suffix in ("ing", "ed") and len(stem) > 3 and stem[-1] == stem[-2]:
                stem = stem[:-1]  # shipping -> ship, planned -> plan
            return stem
    return word


_ANTONYMS = frozenset(frozenset((_stem(a), _stem(b))) for a, b in _ANTONYM_WORDS)


# "payday falls on a holiday" (the season is "autumn"), "two weeks of nights" (a count, not the time of day)
_VERB_FORMS = frozenset({"falls", "falling", "fell", "nights"})
_DEICTIC_DAYS = frozenset({"today", "tomorrow", "yesterday", "tonight"})  # "coming tomorrow" is tomorrow
_WEEKDAYS = frozenset({"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"})
_TODAY_PARTS = frozenset({"tonight", "this:evening", "this:morning", "this:afternoon", "this:night"})

# after "last" as a verb ("how long does rice last in the fridge", "does the battery last?")
_AFTER_VERB_LAST = frozenset({"", "in", "for", "on", "after", "before", "through", "until", "till", "with",
                              "without", "if", "when", "once", "per", "longer", "long", "up", "outside",
                              "unopened", "opened", "frozen"})
_DETERMINERS_LAST = frozenset({"the", "my", "your", "his", "her", "our", "their", "its", "this", "that", "a"})


def _verb_last(prev: str, nxt: str) -> bool:
    """"last" is the verb (to keep, to hold out), not the ordinal, when no determiner comes
    before it and the question ends or a preposition follows (issue 18, sixth round)."""
    return prev not in _DETERMINERS_LAST and nxt in _AFTER_VERB_LAST


def extract(text: str) -> QuestionFacts:
    """The numbers, time expressions, negation count and content stems of ``text``."""
    tokens = _tokens(text)
    numbers: list[str] = []
    times: set[str] = set()
    negations = 0
    content: set[str] = set()
    units: set[str] = set()
    for i, tok in enumerate(tokens):
        prev = tokens[i - 1] if i else ""
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        near_digit = any(c.isdigit() for c in "".join(tokens[max(0, i - 2): i + 3]))
        if _CANONICAL_TIME.match(tok):
            times.add(tok)
        elif any(c.isdigit() for c in tok):
            m = _ORDINAL_DIGITS.match(tok)
            numbers.append("#" + m.group(1) if m else tok)
        elif tok in _NUMBER_WORDS:
            numbers.append(_NUMBER_WORDS[tok])
        elif tok in _ORDINALS and not (tok == "last" and (nxt in _TIME_WORDS or _verb_last(prev, nxt))):
            numbers.append("#" + _ORDINALS[tok])
        elif tok in _MONTHS or (tok == "may" and near_digit):
            times.add(_MONTHS.get(tok, "may"))
        elif tok in ("am", "pm") and near_digit and not (tok == "am" and prev == "i"):
            times.add(tok)
        elif (_stem(tok) in _TIME_WORDS or tok in _TIME_WORDS) and tok not in _VERB_FORMS:
            word = tok if tok in _TIME_WORDS else _stem(tok)
            modified = prev in _TIME_MODIFIERS and word not in _DEICTIC_DAYS and not (
                prev == "this" and word in _WEEKDAYS)  # "this Saturday" is Saturday
            times.add(f"{prev}:{word}" if modified else word)
        elif tok in _NEGATORS:
            negations += 1
        elif tok in _TIME_MODIFIERS and nxt in _TIME_WORDS:
            continue
        elif tok not in _STOPWORDS and len(tok) > 1:
            content.add(_stem(tok))
            if tok in UNIT_TAGS:
                units.add(UNIT_TAGS[tok])
    if any(_CANONICAL_TIME.match(t) for t in times) and times & _TODAY_PARTS:
        times = (times - _TODAY_PARTS) | {"today"}  # "7pm tonight" / "7pm today"
    if "year" in times and any(_YEAR.match(n) for n in numbers):
        times.discard("year")  # "tax year 2025" / "in 2025"
    return QuestionFacts(tuple(numbers), frozenset(times), negations, frozenset(content), frozenset(units))


def content_words(text: str) -> list[str]:
    """The surface words ``extract`` counts as content (same tokenizer and stop list), in
    order, unstemmed: what the verifier aligns with WordNet and word vectors."""
    facts = extract(text)
    seen: dict[str, None] = {}
    for tok in _tokens(text):
        if _stem(tok) in facts.content and tok not in _STOPWORDS and len(tok) > 1:
            seen.setdefault(tok, None)
    return list(seen)


def same_word(a: str, b: str) -> bool:
    """Same stem, shared long prefix, or listed synonym (the guard's own notion)."""
    return _same_word(_stem(a), _stem(b))


def antonym_words(a: str, b: str) -> bool:
    """Listed antonyms or a negating prefix (un-/in-/dis-/non-) on the same stem."""
    return _antonyms(_stem(a), _stem(b))


def _dedup(numbers: tuple[str, ...]) -> list[str]:
    return list(dict.fromkeys(numbers))


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    if len(a) >= 5 and len(b) >= 5 and (a.startswith(b) or b.startswith(a)):
        return True
    ga, gb = _SYNONYM_OF.get(a), _SYNONYM_OF.get(b)
    return ga is not None and ga == gb


def _antonyms(a: str, b: str) -> bool:
    if frozenset((a, b)) in _ANTONYMS:
        return True
    for p in _NEG_PREFIXES:
        if (a == p + b or b == p + a) and len(min(a, b, key=len)) >= 3:
            return True
    return False


def _value(number: str) -> str:
    """An ordinal compares as its number: "the 2nd payment" / "payment number 2"."""
    return number[1:] if number.startswith("#") and number[1:].isdigit() else number


# A number token as (prefix tag, value, suffix tag): "usd500", "m5000", "w2", "ps5" carry a
# prefix, "400mm", "24mp", "16s", "2k" a suffix, "4x8" / "ft4x8" a size (quantities.canonical).
_NUMBER_PARTS = re.compile(r"^([a-z]*)(\d+(?:\.\d+)?(?:x\d+(?:\.\d+)?)?)([a-z]*)$")
_YEAR = re.compile(r"^(?:19|20)\d\d$")


def _readings(number: str) -> list[tuple[str, str]]:
    """(tag, value) readings of one number token; tag "" is a bare number. "2k" also reads
    as the bare 2000 ("2k" / "$2,000"); a suffix tag is kept apart from a prefix tag ("16s"
    is not 16 seconds)."""
    m = _NUMBER_PARTS.match(number)
    if m is None:
        return [(number, "")]
    prefix, value, suffix = m.groups()
    tag = prefix if not suffix else f"{prefix}-{suffix}"
    readings = [(tag, _plain(value))]
    if suffix == "k" and not prefix and "x" not in value:
        readings.append(("", _plain(str(Decimal(value) * 1000))))
    return readings


def _plain(value: str) -> str:
    """"2.0" and "2" are one value; sizes ("4x8") are kept as written."""
    if "x" in value:
        return value
    d = Decimal(value)
    return format(d.quantize(Decimal(1)) if d == d.to_integral() else d.normalize(), "f")


def same_number(a: str, b: str, units_a: frozenset[str] = frozenset(), units_b: frozenset[str] = frozenset()) -> bool:
    """One fact in two spellings: the same token, or the same value where one side gives the
    unit, currency or code letter and the other gives the bare number ("$500" / "500",
    "W-2" / "2", "200°C" / "200", "2k" / "$2,000", "5K" / "5 km"). Two different tags
    never meet ("$500" / "€500", "W-2" / "W-4", "2 kg" / "2 lb"). A bare number is also the
    amount in another unit of that kind when its own side names such a unit elsewhere ("hours
    over 40" / "40 hours"; ``units_a``/``units_b``: the unit tags each side names without an
    amount), never otherwise ("2 nights" is not "2 weeks")."""
    if a == b:
        return True
    for ta, va in _readings(a):
        for tb, vb in _readings(b):
            if va == vb and (ta == tb or not ta or not tb):
                return True
            if not ta and tb and tb in units_a and _in_some_unit(va, tb, vb):
                return True
            if not tb and ta and ta in units_b and _in_some_unit(vb, ta, va):
                return True
    return False


def _in_some_unit(bare: str, tag: str, amount: str) -> bool:
    """The bare number is the amount written in one of the tag's units: "over 40" / "40
    hours" (s144000), "5" / "5 km" (m5000)."""
    if "x" in bare or "x" in amount or tag not in UNIT_FACTORS:
        return False
    return any(Fraction(bare) * f == Fraction(amount) for f in UNIT_FACTORS[tag])


def _kind(number: str) -> str:
    """Which sequence a value's order is compared within: a year, a tagged amount/code of one
    tag, or the bare numbers. "2 kg at 190°C" and "190°C, 2 kg" are the same facts; "2 adults
    and 3 kids" and "3 adults and 2 kids" are not."""
    if _YEAR.match(number):
        return "year"
    m = _NUMBER_PARTS.match(number)
    return number if m is None else f"{m.group(1)}-{m.group(3)}"


def _matched(query: tuple[str, ...], cached: tuple[str, ...], units_q: frozenset[str] = frozenset(),
             units_c: frozenset[str] = frozenset()) -> tuple[str, ...] | None:
    """``query``'s numbers written as ``cached`` writes them, or None if one side has a
    value the other lacks."""
    out = []
    for n in query:
        if n in cached:
            out.append(n)
            continue
        match = next((c for c in cached if same_number(n, c, units_q, units_c)), None)
        if match is None:
            return None
        out.append(match)
    if any(c not in out for c in cached):
        return None
    return tuple(out)


def check_structure(query: QuestionFacts, cached: QuestionFacts) -> GuardVerdict:
    """Rules 1-3 only (numbers, dates/times, negation count): the hard checks the learned
    verifier (``verifier.py``) keeps, without the content-word rule it replaces."""
    qn, cn = tuple(_value(n) for n in query.numbers), tuple(_value(n) for n in cached.numbers)
    matched = _matched(qn, cn, query.units, cached.units)
    if matched is None:
        return GuardVerdict(False, f"numbers differ: {list(query.numbers)} vs {list(cached.numbers)}")
    for kind in {_kind(n) for n in cn}:
        q_kind, c_kind = [n for n in matched if _kind(n) == kind], [n for n in cn if _kind(n) == kind]
        if len(set(c_kind)) > 1 and _dedup(tuple(q_kind)) != _dedup(tuple(c_kind)):
            return GuardVerdict(False, "numbers in another order")
    if query.times != cached.times:
        return GuardVerdict(False, f"dates/times differ: {sorted(query.times)} vs {sorted(cached.times)}")
    if query.negations != cached.negations:
        return GuardVerdict(False, "negation differs")
    return GuardVerdict(True)


def check_facts(query: QuestionFacts, cached: QuestionFacts) -> GuardVerdict:
    """Compare two extracted questions; see the module docstring for the rules."""
    structure = check_structure(query, cached)
    if not structure.ok:
        return structure
    only_q = [w for w in query.content if not any(_same_word(w, o) for o in cached.content)]
    only_c = [w for w in cached.content if not any(_same_word(w, o) for o in query.content)]
    for a in only_q:
        for b in only_c:
            if _antonyms(a, b):
                return GuardVerdict(False, f"negation differs: {a} vs {b}")
    if only_q and only_c:
        return GuardVerdict(False, f"content words differ: {sorted(only_q)} vs {sorted(only_c)}")
    extra = [w for w in only_q + only_c if w not in _FILLER]
    if extra:
        return GuardVerdict(False, f"one question adds {sorted(extra)}")
    return GuardVerdict(True)


def check(query: str, cached: str) -> GuardVerdict:
    """May the answer cached for question ``cached`` be served for ``query``?"""
    return check_facts(extract(query), extract(cached))
