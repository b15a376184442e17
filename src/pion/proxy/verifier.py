"""Second-stage check of an L1 similarity hit (``pion-serve --verifier aligned``).

The guard's content-word rule refuses any word it has no synonym for, so real users'
paraphrases ("profile photo" for "profile picture", "send" for "transfer") miss. The
aligned verifier keeps the guard's hard checks, which are right whenever they fire
(numbers, dates/times, negation), and replaces its word lists with WordNet:

  1. hard gates (refusals count as ``refused_by_guard``): ``guard.check_structure``
     (numbers, dates, negation count), antonyms from the guard and WordNet, WordNet
     co-hyponyms swapped for each other (spring vs autumn: alternatives, not synonyms),
     a named-entity gate (a capitalised name on one side only: Flixora vs Streamly) and
     a direction check ("from A to B" vs "from B to A") and opposite actions
     ("turn on" vs "switch off", "stop sharing" vs "share": ``opposites.py``); then the
     polarity reader (``polarity.py``: "instead of direct deposit" vs "set up direct
     deposit") and the scope reader (``qualifiers.py``: "... as a new patient" added);
  2. content words aligned across the two questions: same stem, or a WordNet synonym or
     one-hop relative (hypernym, verb group, similar-to, derivation) among the words the
     other side has instead (``lexicon.py``);
  3. what stays unaligned decides (``refused_by_verifier``): nothing -> serve; words on
     one side only (a scope added: "... on a laptop", "... as a gift") -> refuse; words
     swapped on both sides (at most ``max_swapped``) -> serve only when the sentence
     cosine is at least ``swap_similarity``.

``max_swapped``, ``swap_similarity`` and the candidate cosine (``--cache-threshold 0.8``)
were chosen on the train and dev splits together (``benchmarks/semantic_cache_eval.py
--fit``); the test split was only scored. Tried and dropped on train/dev: a logistic
score over (cosine, unaligned counts, alignment quality) learned to *distrust* high
cosine (templated scope traps keep it high) and refused identical questions; MiniLM
word vectors for the words WordNet cannot align changed nothing at the chosen setting
and cost an AI.EMBED round trip per hit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from pion.proxy import guard, opposites, polarity, qualifiers, quantities
from pion.proxy.lexicon import WordNetLexicon

# Refusal reasons, the label values of /metrics and keys of /v1/stats.
REASONS = ("numbers", "dates", "negation", "entity", "added_words", "swapped_words",
           "low_score", "cross_score", "polarity", "scope")  # low_score: --verifier learned
# (learned_verifier.py); cross_score: the cross-encoder of --verifier cross (cross_verifier.py);
# polarity / scope: the sixth-round readers (polarity.py, qualifiers.py), part of the hard checks

_POSSESSIVE = re.compile(r"'s$|s'$")
_NAMED_SEASON = re.compile(r"\b([A-Z][a-zA-Z]+) (Spring|Summer|Autumn|Fall|Winter)\b")
_ACRONYM = re.compile(r"\b[A-Z]{2,}\b")
_NOT_ACRONYMS = frozenset({"AM", "PM", "OK", "I"})
_CAPITALISED = re.compile(r"(?<![.?!]\s)(?<!^)\b([A-Z][a-zA-Z0-9'&.-]*[a-z][a-zA-Z0-9'&-]*)")
_SOFT_TIMES = frozenset({"now", "currently"})
_ONE_COMPOUND = re.compile(r"\bone-\w", re.IGNORECASE)  # one-way, one-time: a real number
_FROM = re.compile(r"\bfrom (?:the |my |a )?(\w+)", re.IGNORECASE)
_TO = re.compile(r"\b(?:to|into) (?:the |my |a )?(\w+)", re.IGNORECASE)
# Words whose capital letter names a day/month or the speaker, not an entity.
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_NOT_ENTITIES = frozenset({"I", *_DAYS, *(d + "s" for d in _DAYS), "January", "February", "March",
                           "April", "May", "June", "July", "August", "September", "October",
                           "November", "December", "Is", "Are", "Do", "Does", "Can", "How", "What",
                           "Why", "Where", "When", "Which", "Will", "Please", "My", "The", "Hi",
                           "Hello", "Thanks", "Okay", "Sure",
                           # The speaker and the openers of a turn: a conversation's resolved
                           # text joins its user turns without punctuation ("... my roof Yes
                           # please What's the rate"), so a turn's first word looks mid-sentence.
                           "I'm", "I've", "I'll", "I'd", "Yes", "No", "Yeah", "Yep", "Nope", "Ok",
                           "Also", "And", "But", "So", "Then", "Thank", "Got", "What's", "How's",
                           "Where's", "When's", "Who's", "It's", "That's", "There's", "Here's",
                           # closed-class words that open a turn ("This is taking too long",
                           # "Am I able to ...")
                           "This", "That", "These", "Those", "It", "Its", "We", "Our", "You",
                           "Your", "He", "She", "They", "Their", "His", "Her", "There", "Am",
                           "Was", "Were", "Has", "Have", "Had", "Should", "Could", "Would", "Did",
                           "Any", "Some", "Just", "Now", "Or", "If"})
# A name's kind said beside it ("IronLoop Gym", "the Ashford Library") is the same entity as
# the bare name: a one-sided capitalised word is dropped when it is a common noun for a
# place or an organisation (WordNet hypernyms, not a hand list) written next to a shared name.
_KIND_OF_NAMED = ("establishment", "facility", "organization", "structure")


@dataclass(frozen=True, slots=True)
class VerifierParams:
    """The decision's tunables (see the module docstring)."""

    max_swapped: int  # most unaligned words (both sides together) a served hit may have
    swap_similarity: float  # sentence cosine a hit with swapped words needs


# Chosen by ``benchmarks/semantic_cache_eval.py --fit`` on train + dev (never test).
DEFAULT_PARAMS = VerifierParams(max_swapped=5, swap_similarity=0.8)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the hit may be served; ``reason`` (one of ``REASONS``) when not."""

    ok: bool
    reason: str = ""
    detail: str = ""
    stage: str = "guard"  # which stage refused: "guard" (hard checks) or "verifier" (alignment)


@dataclass(frozen=True, slots=True)
class Alignment:
    """Content words of each side that found no partner on the other."""

    only_query: tuple[str, ...]
    only_cached: tuple[str, ...]


def _entities(text: str) -> set[str]:
    """Capitalised names, lower-cased, possessive dropped ("Lisbon's" -> "lisbon")."""
    names = {_POSSESSIVE.sub("", m.group(1).lower().replace("\u2019", "'")).rstrip(".'")
             for m in _CAPITALISED.finditer(text.strip()) if m.group(1) not in _NOT_ENTITIES}
    return names | _acronyms(text)


def _acronyms(text: str) -> set[str]:
    """All-capital words (NYC, SF, LISBON), lower-cased; not units or am/pm (TB, USD, PM),
    which ``quantities.canonical`` compares as amounts and times."""
    return {w.lower() for w in _ACRONYM.findall(text)
            if w.lower() not in quantities.UNIT_NAMES and w not in _NOT_ACRONYMS}


def _joined_names(text: str) -> str:
    """"Mail Spring" -> "MailSpring" for the fact checks: a season word inside a capitalised
    name is part of the name, not a date ("Mail Spring" vs "MailSpring")."""
    return _NAMED_SEASON.sub(r"\1\2", text)


def _squashed(text: str) -> str:
    """Lower case without spaces, hyphens or apostrophes: "Mail Spring" finds "MailSpring"."""
    return re.sub(r"[\s'\u2019-]+", "", text.lower())


def _name_found(name: str, other: str) -> bool:
    """The name is written in ``other`` too, in any case, spacing, possessive or number
    ("Saturdays" / "saturday")."""
    singular = name[:-1] if len(name) >= 4 and name.endswith("s") else name
    return (name in other.lower() or (len(name) >= 4 and _squashed(name) in _squashed(other))
            or re.search(rf"\b{re.escape(singular)}s?\b", other, re.IGNORECASE) is not None)


def _name_as_modifier(name: str, text: str, other: str) -> bool:
    """``text`` names what ``other`` calls "my/the <noun>": "my Lisbon hotel booking" vs "my
    hotel booking", "CloudNest's account" vs "my account". A name elsewhere ("... on
    Android", "in Lisbon") is a scope of its own and still refuses."""
    for m in re.finditer(rf"\b{re.escape(name)}(?:'s|\u2019s)?\s+([a-z]+)", text, re.IGNORECASE):
        head = m.group(1).lower()
        if re.search(rf"\b(?:my|the|our|your) {re.escape(head)}\b", other, re.IGNORECASE):
            return True
    return False


def _kind_beside_name(word: str, text: str, shared: set[str], lexicon: WordNetLexicon) -> bool:
    """``word`` ("gym") is the kind of a name both questions share, written beside it
    ("IronLoop Gym", "Gym IronLoop"), not a name of its own."""
    if not lexicon.loaded or not any(lexicon.descends_from(word, kind) for kind in _KIND_OF_NAMED):
        return False
    tokens = [_POSSESSIVE.sub("", t.lower()) for t in re.findall(r"[\w'\u2019&.-]+", text)]
    return any(t == word and ((k > 0 and tokens[k - 1] in shared) or (k + 1 < len(tokens) and tokens[k + 1] in shared))
               for k, t in enumerate(tokens))


def _without_soft_facts(q: guard.QuestionFacts, c: guard.QuestionFacts,
                        hard_one: bool = False) -> tuple[guard.QuestionFacts, guard.QuestionFacts]:
    """Drop facts that do not change the answer when only one side has them: the pronoun
    "one" ("get a new one", "in one order") when the other side has no number, and
    "now"/"currently" (a cache entry answers the present anyway). Seen on train pairs."""
    def soften(a: guard.QuestionFacts, b: guard.QuestionFacts) -> guard.QuestionFacts:
        numbers = a.numbers
        if "1" in numbers and not b.numbers and not hard_one:
            numbers = tuple(n for n in numbers if n != "1")
        return replace(a, numbers=numbers, times=a.times - _SOFT_TIMES)

    return soften(q, c), soften(c, q)


def _direction(text: str) -> tuple[str, str] | None:
    """(origin, destination) of "from X ... to Y" / "to Y ... from X", else None: the same
    words in the other direction are another trip ("airport to downtown" vs "downtown to
    the airport")."""
    src = _FROM.search(text)
    if src is None:
        return None
    dst = _TO.search(text, src.end()) or _TO.search(text)
    if dst is None:
        return None
    return src.group(1).lower(), dst.group(1).lower()


class Verifier:
    """Decides whether a similarity hit is the same question; thread-safe after ``load``."""

    def __init__(self, params: VerifierParams = DEFAULT_PARAMS, lexicon: WordNetLexicon | None = None,
                 readers: bool = True) -> None:
        self.params = params
        self.lexicon = lexicon if lexicon is not None else WordNetLexicon()
        # The polarity and scope readers (issue 18, sixth round); off only to measure
        # what they add (benchmarks/hard_check_eval.py).
        self.readers = readers

    def load(self) -> bool:
        """Load WordNet (2-10 s on a busy CPU); without it words align by stem only."""
        return self.lexicon.load()

    def _unaligned(self, words: list[str], other: list[str]) -> list[str]:
        return [w for w in words if not self._aligned(w, words, other)]

    def _aligned(self, word: str, own: list[str], other: list[str]) -> bool:
        """Same word on the other side, or a WordNet relative among the words the other side
        has *instead* (not ones both share): "undo a change" / "redo a change" must not
        align undo and redo each with the shared "change"."""
        if any(guard.same_word(word, o) for o in other):
            return True
        if not self.lexicon.loaded:
            return False
        exclusive = [o for o in other if not any(guard.same_word(o, w) for w in own)]
        return any(self.lexicon.related(word, o) for o in exclusive)

    def hard_check(self, query: str, cached: str) -> Verdict:
        """The gates that refuse outright: numbers, dates, negation/antonyms, named entities."""
        hard_one = bool(_ONE_COMPOUND.search(query) or _ONE_COMPOUND.search(cached))
        fq, fc = guard.extract(_joined_names(query)), guard.extract(_joined_names(cached))
        if self.readers and fq.negations != fc.negations and polarity.same_polarity(query, cached, self.lexicon):
            fq = replace(fq, negations=fc.negations)  # negated alike in other words: "can't" / "unable to"
        structure = guard.check_structure(*_without_soft_facts(fq, fc, hard_one))
        if not structure.ok:
            reason = ("numbers" if structure.reason.startswith("numbers") else
                      "dates" if structure.reason.startswith("dates") else "negation")
            return Verdict(False, reason, structure.reason)
        q, c = guard.content_words(query), guard.content_words(cached)
        # Antonyms are looked for among all words one side has and the other lacks, not
        # only the unaligned ones: a loose WordNet relation may align "decrease" with "limit".
        only_q = [w for w in q if not any(guard.same_word(w, o) for o in c)]
        only_c = [w for w in c if not any(guard.same_word(w, o) for o in q)]
        for a in only_q:
            for b in only_c:
                if guard.antonym_words(a, b) or (self.lexicon.loaded and self.lexicon.antonyms(a, b)):
                    return Verdict(False, "negation", f"antonyms: {a} vs {b}")
                if self.lexicon.loaded and self.lexicon.cohyponyms(a, b):
                    return Verdict(False, "entity", f"alternatives: {a} vs {b}")
        opposite = opposites.opposite_actions(query, cached)
        if opposite is not None:
            return Verdict(False, "negation", opposite)
        dq, dc = _direction(query), _direction(cached)
        if dq and dc and dq != dc and set(dq) == set(dc):
            return Verdict(False, "negation", f"direction differs: {dq[0]} -> {dq[1]} vs {dc[0]} -> {dc[1]}")
        eq, ec = _entities(query), _entities(cached)
        shared = eq & ec
        only_q = [e for e in eq - ec if not _name_found(e, cached)
                  and not _kind_beside_name(e, query, shared, self.lexicon)]
        only_c = [e for e in ec - eq if not _name_found(e, query)
                  and not _kind_beside_name(e, cached, shared, self.lexicon)]
        if only_q and only_c:
            return Verdict(False, "entity", f"names differ: {sorted(eq)} vs {sorted(ec)}")
        one_sided, text, other = (only_q, query, cached) if only_q else (only_c, cached, query)
        if one_sided and not all(_name_as_modifier(e, text, other) for e in one_sided):
            return Verdict(False, "entity", f"names differ: {sorted(eq)} vs {sorted(ec)}")
        if self.readers:
            return self._readers(query, cached)
        return Verdict(True)

    def _readers(self, query: str, cached: str) -> Verdict:
        """The sixth-round readers, after the older checks passed: polarity, then scope."""
        flipped = polarity.differs(query, cached, self.lexicon)
        if flipped is not None:
            return Verdict(False, "polarity", flipped)
        scope = qualifiers.differs(query, cached, self.lexicon)
        if scope is not None:
            return Verdict(False, "scope", scope)
        return Verdict(True)

    def align(self, query: str, cached: str) -> Alignment:
        """The content words of each side that no word of the other side accounts for."""
        q, c = guard.content_words(query), guard.content_words(cached)
        return Alignment(tuple(self._unaligned(q, c)), tuple(self._unaligned(c, q)))

    def check(self, query: str, cached: str, similarity: float) -> Verdict:
        """May the answer cached for ``cached`` be served for ``query``? ``similarity`` is
        the sentence cosine the lookup found."""
        hard = self.hard_check(query, cached)
        if not hard.ok:
            return hard
        return self.decide(similarity, self.align(query, cached))

    def decide(self, similarity: float, al: Alignment) -> Verdict:
        """The decision on an alignment whose hard checks passed."""
        nq, nc = len(al.only_query), len(al.only_cached)
        if nq == 0 and nc == 0:
            return Verdict(True)
        if nq == 0 or nc == 0:
            return Verdict(False, "added_words", f"one question adds {sorted(al.only_query + al.only_cached)}",
                           "verifier")
        if nq + nc > self.params.max_swapped or similarity < self.params.swap_similarity:
            return Verdict(False, "swapped_words",
                           f"words differ: {list(al.only_query)} vs {list(al.only_cached)} at cosine {similarity:.3f}",
                           "verifier")
        return Verdict(True)


def from_guard(verdict: guard.GuardVerdict) -> Verdict:
    """The guard's verdict (``--verifier guard``) in the verifier's terms, for the stats."""
    if verdict.ok:
        return Verdict(True)
    text = verdict.reason
    reason = ("numbers" if text.startswith("numbers") else "dates" if text.startswith("dates")
              else "negation" if text.startswith("negation") else "added_words" if text.startswith("one question")
              else "swapped_words")
    return Verdict(False, reason, text, "guard")
