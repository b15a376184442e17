"""One spelling per fact, so the L1 hard checks compare facts rather than spellings.

On new domains the guard read "5 km" / "five kilometres" / "5000 metres", "10 pm" /
"22:00", "July 14" / "the 14th of July" as different facts and refused the paraphrase
(issue 18: 115 of 342 held-out paraphrases were refused by the number, date and name
gates). ``canonical`` rewrites the lower-cased question so that every spelling of one
fact becomes one token the guard's tokenizer keeps whole:

  * number words -> digits ("twenty-three" -> 23, "half a dozen" -> 6, "a couple of" -> 2),
    ordinal words -> digit ordinals ("third" -> 3rd; "second" only after the/my/...);
  * an amount with a unit -> the amount in one base unit, unit first so the token stays
    whole: bytes (decimal: 1 TB = 1000 GB), grams, metres, seconds, and money per
    currency ("$20", "20 dollars", "USD 20" -> usd20). Units of another kind never meet:
    "23 lb" (g10432.6) is not "23 kg" (g23000), "5 miles" is not "5 km";
  * a time of day -> t + 24-hour HHMM ("10 pm", "10:00 PM", "22:00", "ten at night");
  * seasons: "springtime" -> spring, "(in/this/next) fall" -> autumn;
  * a day of a month -> "<mon> <day>" ("July 14", "14 July", "the 14th of July", "Jul 14th"
    -> "jul 14", which the guard reads as the month and the number it always did; ISO
    "2026-07-14" keeps its year as a separate number; a few fixed holidays).

Deliberately not converted (a refused hit costs one backend call, a wrong one serves
another fact): numeric dates such as 3/4 (US and European readings differ), 1024-based
storage, vague amounts ("a few"), "pounds" as money (read as weight), names of places
and products (``verifier.py`` compares those). A hand table rather than ``pint`` /
``dateparser``: the units people put in support questions fit in a screen, lookups stay
in microseconds, and pion-serve gains no dependency (pint's registry takes ~1 s to load).
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

_UNITS_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}
_TENS_WORDS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
               "eighty": 80, "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_ORDINAL_WORDS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20, "thirtieth": 30,
}
_NUM_WORD = "|".join(sorted([*_UNITS_WORDS, *_TENS_WORDS, *_SCALES], key=len, reverse=True))
_NUM_RUN = re.compile(rf"\b(?:{_NUM_WORD})(?:(?:[ -]|[ ]and[ ])(?:{_NUM_WORD}))*\b")
_ORD_RUN = re.compile(rf"\b(?:(?:{'|'.join(_TENS_WORDS)})[ -])?(?:{'|'.join(_ORDINAL_WORDS)})\b")
_DETERMINERS = frozenset({"the", "my", "your", "his", "her", "our", "their", "its"})

# unit word -> (base-unit tag, factor to the base unit)
_UNIT_TABLE: dict[str, tuple[str, Fraction]] = {}
for _names, _tag, _factor in (
    (("tb", "terabyte", "terabytes"), "b", Fraction(10**12)),
    (("gb", "gig", "gigs", "gigabyte", "gigabytes"), "b", Fraction(10**9)),
    (("mb", "megabyte", "megabytes"), "b", Fraction(10**6)),
    (("kb", "kilobyte", "kilobytes"), "b", Fraction(10**3)),
    (("kg", "kgs", "kilo", "kilos", "kilogram", "kilograms", "kilogramme", "kilogrammes"), "g", Fraction(1000)),
    (("g", "gram", "grams", "gramme", "grammes"), "g", Fraction(1)),
    (("lb", "lbs", "pound", "pounds"), "g", Fraction("453.59237")),
    (("oz", "ounce", "ounces"), "g", Fraction("28.349523125")),
    (("km", "kms", "kilometre", "kilometres", "kilometer", "kilometers"), "m", Fraction(1000)),
    (("m", "metre", "metres", "meter", "meters"), "m", Fraction(1)),
    (("cm", "centimetre", "centimetres", "centimeter", "centimeters"), "m", Fraction(1, 100)),
    (("mi", "mile", "miles"), "m", Fraction("1609.344")),
    (("ft", "foot", "feet"), "m", Fraction("0.3048")),
    (("sec", "secs", "second", "seconds"), "s", Fraction(1)),
    (("min", "mins", "minute", "minutes"), "s", Fraction(60)),
    (("hr", "hrs", "hour", "hours"), "s", Fraction(3600)),
    (("day", "days", "night", "nights"), "s", Fraction(86400)),  # "a 14-night stay" / "two weeks"
    (("week", "weeks", "wk", "wks"), "s", Fraction(7 * 86400)),
    (("year", "years", "yr", "yrs"), "yr", Fraction(1)),  # an age or a term, never converted to days
    (("dollar", "dollars", "usd", "bucks"), "usd", Fraction(1)),
    (("euro", "euros", "eur"), "eur", Fraction(1)),
    (("gbp", "quid"), "gbp", Fraction(1)),
):
    for _name in _names:
        _UNIT_TABLE[_name] = (_tag, _factor)
_UNIT_NAMES = "|".join(sorted(_UNIT_TABLE, key=len, reverse=True))
# one written name per unit, for dimensions ("4 by 8 feet" -> ft4x8): the first name listed
_UNIT_CANONICAL: dict[str, str] = {}
for _unit, _entry in _UNIT_TABLE.items():
    _UNIT_CANONICAL[_unit] = next(u for u in _UNIT_TABLE if _UNIT_TABLE[u] == _entry)
UNIT_NAMES = frozenset(_UNIT_TABLE)  # for verifier.py: "TB" / "USD" are units, not names
UNIT_TAGS = {name: tag for name, (tag, _) in _UNIT_TABLE.items() if len(name) > 1}  # "hours" -> s
# base-unit tag -> the factors of its units: a bare "40" on one side is "40 hours" (s144000)
UNIT_FACTORS: dict[str, frozenset[Fraction]] = {}
for _tag, _factor in _UNIT_TABLE.values():
    UNIT_FACTORS[_tag] = UNIT_FACTORS.get(_tag, frozenset()) | {_factor}
# "a kilo", "an hour": one of a unit; not "a week"/"a day" (a time span) nor one-letter units
_A_UNIT = re.compile(r"\ban? (?=(?:%s)\b)" % "|".join(
    sorted((u for u in _UNIT_TABLE if len(u) > 2 and u not in ("day", "days", "night", "nights", "week", "weeks", "second", "year", "years", "meter")),
           key=len, reverse=True)))
_NUMBER = r"\d+(?:\.\d+)?"
_AMOUNT_UNIT = re.compile(rf"\b({_NUMBER})[ -]?({_UNIT_NAMES})\b")
_CURRENCY_FIRST = re.compile(rf"(?:([$€£])\s?|\b(usd|eur|gbp)\s)({_NUMBER})\b")
_SYMBOL_TAG = {"$": "usd", "€": "eur", "£": "gbp", "usd": "usd", "eur": "eur", "gbp": "gbp"}

_MONTHS = {"january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4,
           "apr": 4, "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8,
           "september": 9, "sept": 9, "sep": 9, "october": 10, "oct": 10, "november": 11,
           "nov": 11, "december": 12, "dec": 12}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.? (?:the )?{_DAY}\b")
_DAY_MONTH = re.compile(rf"\b(?:the )?{_DAY} (?:of )?({_MONTH})\b")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_ABBR = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_HOLIDAYS = [(re.compile(r"\bchristmas eve\b"), (12, 24)), (re.compile(r"\bchristmas(?: day)?\b"), (12, 25)),
             (re.compile(r"\bnew year'?s eve\b"), (12, 31)), (re.compile(r"\bnew year'?s(?: day)?\b"), (1, 1)),
             (re.compile(r"\bhalloween\b"), (10, 31)), (re.compile(r"\bvalentine'?s(?: day)?\b"), (2, 14))]

_SEASON_TIME = re.compile(r"\b(spring|summer|winter)time\b")
_FALL = re.compile(r"(?<=\bin )fall\b|(?<=\bthe )fall\b|(?<=\bthis )fall\b|(?<=\bnext )fall\b|(?<=\blast )fall\b")
_MERIDIEM = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s?([ap])\.?m\b\.?")
_PART_OF_DAY = re.compile(
    r"\b(?:(half|quarter) (past|to) )?(\d{1,2})(?::(\d{2}))?(?: o'?clock)? "
    r"(in the morning|in the afternoon|in the evening|at night|tonight|this morning|this afternoon|this evening)\b")
_CLOCK_24 = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")
_NOON = re.compile(r"\b(?:noon|midday)\b")
_MIDNIGHT = re.compile(r"\bmidnight\b")

# Issue 18, sixth round: spellings of one fact that the checks read as two.
_CODE_HYPHEN = re.compile(r"\b([a-z]{1,3})-(\d{1,4})\b|\b(\d{1,4})-([a-z])\b")  # W-2 -> w2, 1040-X -> 1040x
_CODE_PAREN = re.compile(r"\b(\d{3})\(([a-z])\)")  # 401(k) -> 401k
_TEMPERATURE = re.compile(r"\b(\d+(?:\.\d+)?)(?: ?(?:°|º|degrees?) ?| ?(?=celsius|fahrenheit|centigrade)|(?=[cf]\b))"
                          r"(c|f|celsius|fahrenheit|centigrade)\b")
_CURRENCY_K = re.compile(r"([$€£])(\d+(?:\.\d+)?)k\b")  # $500k -> $500000
_MEASURES = (r"cups?|teaspoons?|tsp|tablespoons?|tbsp|inch(?:es)?|pints?|gallons?|lit(?:re|er)s?|"
             r"ml|mile|miles|pounds?|lbs?|kilos?|kg|hours?|days?|weeks?")
_FRACTION = re.compile(rf"\b([1-7])/([2348])(?= (?:of an? )?(?:{_MEASURES})\b)")
_FRACTION_WORD = re.compile(rf"\b(?:an?|1) (quarter|third|half)(?: of)?(?: an?)? (?=(?:{_MEASURES})\b)"
                            rf"|\bhalf an? (?=(?:{_MEASURES})\b)")
_AND_A_HALF = re.compile(r"\b(\d+) and a half\b")
_MULTIPLIER = re.compile(r"\b(\d{1,2}(?:\.\d+)?) ?x\b(?! ?\d)|\b(\d+(?:\.\d+)?) times(?= (?:the|my|your|as|normal|"
                         r"regular|base|usual|pay|rate|salary|wage))")
_TIME_AND_A_HALF = re.compile(r"\btime and a half\b")
# "4x8", "4 x 8 ft", "4 by 8 ft", "4 ft by 8 ft"; "by" only with a unit ("divide 10 by 2" is no size)
_DIMENSIONS = re.compile(rf"\b(\d+(?:\.\d+)?)(?: ?({_UNIT_NAMES}))? ?(x|by|×) ?(\d+(?:\.\d+)?)(?: ?({_UNIT_NAMES}))?\b")
_PERIOD_ADVERBS = {"hourly": "hour", "daily": "day", "weekly": "week", "monthly": "month", "yearly": "year",
                   "annually": "year", "annual": "year"}
_PERIOD = re.compile(r"\b(hourly|daily|weekly|monthly|yearly|annually|annual)\b"
                     r"|(?<!\bfor )(?<!\bwithin )(?<!\bafter )\b(?:per|each|every|an?) (hour|day|week|month|year)\b"
                     r"|\b(hour|day|week|month|year) by \3\b")
_OF_THE_MONTH = re.compile(r"\b(\d{1,2}(?:st|nd|rd|th)) of the month\b")
_ABBREVIATIONS = [(re.compile(r"\b(?:tmrw|tmr|tmw|tmrrw)\b"), "tomorrow")]


def _words_value(words: list[str]) -> int | None:
    """Value of a run of number words ("two hundred and five" -> 205), None if not one number."""
    total, current, last = 0, 0, ""
    for w in words:
        if w == "and":
            continue
        if w in _UNITS_WORDS:
            if last in _UNITS_WORDS or (last in _TENS_WORDS and current % 10):
                return None  # "two three" is two numbers
            current += _UNITS_WORDS[w]
        elif w in _TENS_WORDS:
            if last in _UNITS_WORDS or last in _TENS_WORDS:
                return None
            current += _TENS_WORDS[w]
        else:
            scale = _SCALES[w]
            current = max(current, 1) * scale
            if scale >= 1000:
                total, current = total + current, 0
        last = w
    return total + current


def _number_words(text: str) -> str:
    text = re.sub(r"\bhalf a dozen\b", "6", text)
    text = re.sub(r"\ba dozen\b", "12", text)
    text = re.sub(r"\ba couple of\b", "2", text)
    text = re.sub(rf"\bhalf an? (?=(?:{_UNIT_NAMES})\b)", "0.5 ", text)
    text = _A_UNIT.sub("1 ", text)

    def ordinal(m: re.Match[str]) -> str:
        words = re.split(r"[ -]", m.group(0))
        value = sum(_TENS_WORDS.get(w, 0) for w in words[:-1]) + _ORDINAL_WORDS[words[-1]]
        if words == ["second"]:
            before = text[: m.start()].split()[-1:] or [""]
            after = text[m.end():].split()[:1] or [""]
            if before[0] not in _DETERMINERS and after[0] != "of":
                return m.group(0)  # "wait a second": the time unit
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(value % 10 if value % 100 not in (11, 12, 13) else 0, "th")
        return f"{value}{suffix}"

    text = _ORD_RUN.sub(ordinal, text)

    def cardinal(m: re.Match[str]) -> str:
        value = _words_value(re.split(r"[ -]", m.group(0).replace(" and ", " ")))
        return m.group(0) if value is None else str(value)

    return _NUM_RUN.sub(cardinal, text)


def _fmt(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _amounts(text: str) -> str:
    def with_unit(m: re.Match[str]) -> str:
        tag, factor = _UNIT_TABLE[m.group(2)]
        if tag == "s" and m.group(2) in ("day", "days", "night", "nights", "week", "weeks") and "." in m.group(1):
            return m.group(0)
        return f"{tag}{_fmt(Fraction(m.group(1)) * factor)}"

    def currency(m: re.Match[str]) -> str:
        return f"{_SYMBOL_TAG[m.group(1) or m.group(2)]}{_fmt(Fraction(m.group(3)))}"

    text = _CURRENCY_FIRST.sub(currency, text)
    return _AMOUNT_UNIT.sub(with_unit, text)


def _clock(hour: int, minute: int) -> str:
    return f" t{hour:02d}{minute:02d} "


def _times(text: str) -> str:
    def meridiem(m: re.Match[str]) -> str:
        hour, minute = int(m.group(1)), int(m.group(2) or 0)
        if not 1 <= hour <= 12:
            return m.group(0)
        return _clock(hour % 12 + (12 if m.group(3) == "p" else 0), minute)

    def part_of_day(m: re.Match[str]) -> str:
        hour, minute = int(m.group(3)), int(m.group(4) or 0)
        if not 1 <= hour <= 12:
            return m.group(0)
        if m.group(1):
            minute = 30 if m.group(1) == "half" else 15
            if m.group(2) == "to":
                hour, minute = hour - 1, 60 - minute
        part = m.group(5)
        pm = part in ("in the afternoon", "in the evening", "tonight", "this afternoon", "this evening") or (
            part == "at night" and hour >= 6)
        today = " today " if part.startswith("this") or part == "tonight" else ""
        return _clock(hour % 12 + (12 if pm else 0), minute) + today

    text = _PART_OF_DAY.sub(part_of_day, text)
    text = _MERIDIEM.sub(meridiem, text)
    text = _CLOCK_24.sub(lambda m: _clock(int(m.group(1)), int(m.group(2))), text)
    text = _NOON.sub(_clock(12, 0), text)
    return _MIDNIGHT.sub(_clock(0, 0), text)


def _dates(text: str) -> str:
    def day_token(month: str | int, day: str) -> str | None:
        d, number = int(day), month if isinstance(month, int) else _MONTHS[month]
        return f" {_MONTH_ABBR[number - 1]} {d} " if 1 <= d <= 31 and 1 <= number <= 12 else None

    def iso(m: re.Match[str]) -> str:
        day = day_token(int(m.group(2)), m.group(3))
        return m.group(0) if day is None else f"{day}{m.group(1)}"

    text = _ISO_DATE.sub(iso, text)
    for pattern, (month, day) in _HOLIDAYS:
        text = pattern.sub(day_token(month, str(day)) or "", text)

    text = _MONTH_DAY.sub(lambda m: day_token(m.group(1), m.group(2)) or m.group(0), text)
    return _DAY_MONTH.sub(lambda m: day_token(m.group(2), m.group(1)) or m.group(0), text)


def _spellings(text: str) -> str:
    """Codes, temperatures, fractions, multipliers, dimensions and rates written one way
    (issue 18, sixth round): "W-2"/"w2" -> w2, "401(k)" -> 401k, "200°C"/"200c"/"200 degrees
    celsius" -> c200, "1/4 cup"/"a quarter cup" -> 0.25 cup, "1.5x"/"time and a half" -> x1.5,
    "4 by 8 ft"/"4x8 foot" -> ft4x8, "monthly"/"per month"/"each month" -> permonth."""
    for pattern, word in _ABBREVIATIONS:
        text = pattern.sub(word, text)
    text = _CODE_HYPHEN.sub(lambda m: f"{m.group(1)}{m.group(2)}" if m.group(1) else f"{m.group(3)}{m.group(4)}", text)
    text = _CODE_PAREN.sub(r"\1\2", text)
    text = _TEMPERATURE.sub(lambda m: f"{m.group(2)[0]}{m.group(1)}", text)
    text = _CURRENCY_K.sub(lambda m: f"{m.group(1)}{_fmt(Fraction(m.group(2)) * 1000)}", text)
    text = _FRACTION.sub(lambda m: _fmt(Fraction(int(m.group(1)), int(m.group(2)))), text)
    text = _FRACTION_WORD.sub(
        lambda m: _fmt(Fraction(1, {"quarter": 4, "third": 3}.get(m.group(1) or "half", 2))) + " ", text)
    text = _AND_A_HALF.sub(lambda m: f"{m.group(1)}.5", text)
    text = _TIME_AND_A_HALF.sub("x1.5", text)
    text = _MULTIPLIER.sub(lambda m: f"x{m.group(1) or m.group(2)}", text)

    def dimensions(m: re.Match[str]) -> str:
        first, second = m.group(2), m.group(5)
        if (first and second and _UNIT_TABLE[first] != _UNIT_TABLE[second]) or (
                m.group(3) == "by" and not (first or second)):
            return m.group(0)
        unit = second or first
        name = _UNIT_CANONICAL[unit] if unit else ""
        return f"{name}{m.group(1)}x{m.group(4)}"

    text = _DIMENSIONS.sub(dimensions, text)
    text = _OF_THE_MONTH.sub(r"\1", text)

    def period(m: re.Match[str]) -> str:
        unit = _PERIOD_ADVERBS.get(m.group(1) or "") or m.group(2) or m.group(3)
        return f"per{unit}"

    return _PERIOD.sub(period, text)


def canonical(text: str) -> str:
    """``text`` lower-cased with every number, amount, time and date in one spelling (see
    the module docstring); other words are left as they are."""
    text = text.lower().replace("\u2019", "'")
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)
    text = _SEASON_TIME.sub(r"\1", text)  # springtime -> spring
    text = _FALL.sub("autumn", text)
    text = _number_words(text)
    text = _spellings(text)
    text = _dates(text)
    text = _times(text)
    return re.sub(r" {2,}", " ", _amounts(text)).strip()
