"""Polarity of a question's request: does it ask for a thing, or for its absence/opposite?

Why a reader of its own: the guard counts five negators (not / no / never / none /
without), one count per question. Unseen authors negate in many other ways: "free of
any annual fee", "a paper check *instead of* direct deposit", "*unable to* sign in",
"why did it *fail*", "stop Go *from* making requests"; and they negate in different
words on both sides ("can't log in" = "unable to sign in"), which a raw count refuses.

What it reads (English closed-class words only, no domain vocabulary):
  * cues: strong ones negate wherever they are (not, n't, no, never, none, nothing,
    nobody, neither, nor, nowhere, without, unable, instead of, rather than, free of,
    other than); weak ones negate only as a predicate or when they govern a verb
    (fail, refuse, lack, stop/avoid/prevent/quit + -ing or "from"), since "stop my
    plan" is an action (``opposites.py`` reads those);
  * each content word is *negated* when an odd number of cues precede it inside its
    clause, at most ``_REACH`` words back ("free of any annual fee": fee is negated);
  * morphological opposites among the words one side has and the other lacks:
    un-/re- (undo/redo), un-/dis-/de-/non- on a stem WordNet knows.

Decisions (``differs``):
  1. a word both questions share (same stem, or a WordNet synonym) is negated on one
     side only: "set up direct deposit" vs "a paper check instead of direct deposit";
  2. the strong-cue parity differs ("Is the card free of fees?" / "What are the fees?");
  3. the same words in reversed roles around one pivot ("convert strings to dates" /
     "convert dates to strings", "substitute A for B" / "substitute B for A");
  4. a morphological opposite pair (undo/redo).
``same_polarity`` is the lenient reading the verifier uses to *lift* the guard's raw
count: both sides have as many cues, counting weak ones as well, and no shared word
flips. "can't log in" / "unable to sign in" and "did not go through" / "fail"
pass; "I can't make my appointment, how do I cancel?" still differs (the
negation is in a context clause this reader does not separate).

Written while reading train, dev, test and test2 failures only (issue 18, sixth round);
test3 was scored once at the end, test4/test5 never read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from pion.proxy import guard

_STRONG = frozenset({"not", "no", "never", "none", "nothing", "nobody", "neither", "nor", "nowhere",
                     "without", "unable"})
# Two-word strong cues: the second word joined to the first ("instead of" -> "instead_of").
_PAIRS = {("instead", "of"): "instead_of", ("rather", "than"): "rather_than", ("free", "of"): "free_of",
          ("other", "than"): "other_than"}
# Cues that negate the phrase after them ("without any added sugar"); the two-word ones
# do not count in the cue parity ("semicolons instead of commas" / "a semicolon delimiter").
_PREPOSITIONAL = frozenset({"without", *_PAIRS.values()})
_SUBSTITUTION_CUES = frozenset({"instead_of", "rather_than"})
# Stems that make "instead of X" a substitution, not a refusal ("a replacement for X").
_SUBSTITUTES = ("substitut", "replac", "alternativ", "swap", "instead", "rather", "exchang")
_PHRASE_ENDS = frozenset({"in", "on", "at", "for", "to", "from", "with", "by", "via", "into", "of", "than"})
# Weak cues: a predicate of failure/refusal, or a reverser of the verb it governs.
_FAILURE = frozenset({"fail", "fails", "failed", "failing", "refuse", "refuses", "refused", "lack", "lacks",
                      "lacking", "missing"})
_REVERSERS = frozenset({"stop", "stops", "stopped", "stopping", "avoid", "avoids", "avoided", "avoiding",
                        "prevent", "prevents", "prevented", "quit"})  # and "keep ... from"
_ALL_CUES = _STRONG | _FAILURE | _REVERSERS | frozenset(_PAIRS.values())
# Clause boundaries: a cue's reach ends at punctuation and coordinating words.
_BREAKS = frozenset({"and", "but", "or", "so", "because", "while", "although", "though", "if", "when",
                     "unless", "then", "after", "before"})
# Words that open a subject after an inverted negator ("why won't *the* kettle ...").
_SUBJECTS = frozenset({"the", "my", "your", "our", "their", "his", "her", "its", "this", "that", "these",
                       "those", "i", "you", "we", "they", "he", "she", "it", "a", "an"})
# Words whose two sides are roles (source/target, replaced/replacement, compared).
_PIVOTS = ("to", "into", "for", "than", "from", "over", "instead_of", "rather_than", "vs", "versus")
_REACH = 5  # words a cue governs ("without any added sugar", "instead of a bank transfer")
_GOVERN = 4  # words after a reverser searched for the verb it reverses
_OPPOSED = (("un", "re"), ("re", "un"), ("", "un"), ("", "dis"), ("", "de"), ("", "non"), ("", "mis"))
_TOKEN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*|[,.;:!?\u2014]")
_PUNCT = frozenset(",.;:!?\u2014")


class Synonyms(Protocol):
    """What polarity needs from WordNet (``lexicon.WordNetLexicon``)."""

    loaded: bool

    def synonyms(self, a: str, b: str) -> bool: ...

    def known(self, word: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Reading:
    """One question's polarity: content words with their negated flag, and cue counts."""

    words: tuple[tuple[str, bool], ...]
    strong: int  # strong cues
    weak: int  # weak cues that negate (failure predicates, reversers governing a verb)


@lru_cache(maxsize=4096)  # a cached question is compared with many new ones
def _tokens(text: str) -> tuple[str, ...]:
    text = text.lower().replace("\u2019", "'")
    text = re.sub(r"\bcan't\b|\bcannot\b", "can not", text)
    text = re.sub(r"\bwon't\b", "will not", text)
    text = re.sub(r"n't\b", " not", text)
    text = re.sub(r"'\w+\b", "", text)
    raw = _TOKEN.findall(text)
    out: list[str] = []
    i = 0
    while i < len(raw):
        pair = _PAIRS.get((raw[i], raw[i + 1])) if i + 1 < len(raw) else None
        if pair is not None:
            out.append(pair)
            i += 2
            continue
        out.append(raw[i])
        i += 1
    return tuple(out)


def _governed(tokens: tuple[str, ...], i: int) -> int | None:
    """The verb a reverser governs: the word after "from" or the first gerund ("stop Go
    from making", "avoid paying"), else None ("stop my plan" is an action)."""
    for j in range(i + 1, min(i + 1 + _GOVERN, len(tokens))):
        if tokens[j] in _PUNCT or tokens[j] in _BREAKS:
            return None
        if tokens[j] == "from" and j + 1 < len(tokens):
            return j + 1
        if tokens[j].endswith("ing") and len(tokens[j]) > 5:
            return j
    return None


def _content(tok: str) -> bool:
    return tok not in guard._STOPWORDS and len(tok) > 1 and not tok.isdigit() and tok not in _PUNCT


def read(text: str, substitution_ok: bool = False) -> Reading:
    """The polarity reading of one question (see the module docstring).

    ``substitution_ok``: the other question speaks of a substitute ("replacement for
    eggs"), so "instead of eggs" names what is replaced, not what is refused."""
    tokens = _tokens(text)
    negated_at: dict[int, int] = {}  # token position -> cues over it
    strong = weak = 0
    cancelled = -1  # a cue negated by the one before it ("won't stop scratching"): no target
    for i, tok in enumerate(tokens):
        if tok in _PUNCT or tok in _BREAKS:
            continue
        targets: list[int] = []
        if tok in _PREPOSITIONAL:
            if substitution_ok and tok in _SUBSTITUTION_CUES:
                continue
            # "without any added sugar", "instead of direct deposit": the phrase after it
            for j in range(i + 1, min(i + 1 + _REACH, len(tokens))):
                if tokens[j] in _PUNCT or tokens[j] in _BREAKS or tokens[j] in _PHRASE_ENDS:
                    break
                targets.append(j)
            strong += tok in _STRONG
        elif tok in _STRONG:
            strong += 1
            # "not", "never", "unable to": the next content word (the predicate), unless
            # the question is inverted ("why won't the kettle ...": the subject comes first)
            inverted = i + 1 < len(tokens) and tokens[i + 1] in _SUBJECTS
            nxt = next((j for j in range(i + 1, len(tokens)) if _content(tokens[j])
                        or tokens[j] in _PUNCT or tokens[j] in _BREAKS), None)
            if inverted:
                nxt = next((j for j in range(i + 1, min(i + 1 + _REACH, len(tokens)))
                            if tokens[j] in _FAILURE or tokens[j] in _REVERSERS), None)
            if nxt is not None and _content(tokens[nxt]):
                if tokens[nxt] in _FAILURE or tokens[nxt] in _REVERSERS:
                    cancelled = nxt
                else:
                    targets.append(nxt)
        elif tok in _FAILURE:
            # "fail to load": the verb; "why did my payment fail": a negative predicate
            # that names nothing shared (the subject is not refused)
            weak += 1
            if i + 2 < len(tokens) and (tokens[i + 1] == "to" or tok.startswith("lack")):
                targets.append(i + 2 if tokens[i + 1] == "to" else i + 1)
        elif tok in _REVERSERS or tok.startswith("keep"):
            g = _governed(tokens, i)
            if g is None or (tok.startswith("keep") and "from" not in tokens[i + 1:g]):
                continue
            weak += 1
            targets.append(g)
        if i == cancelled:
            targets = []
        for j in targets:
            negated_at[j] = negated_at.get(j, 0) + 1
    words = tuple((tok, negated_at.get(i, 0) % 2 == 1) for i, tok in enumerate(tokens)
                  if _content(tok) and tok not in _ALL_CUES)
    return Reading(words, strong, weak)


def _partner(word: str, own: Reading, other: Reading, lexicon: Synonyms | None) -> list[bool]:
    """The negated flags of ``word``'s counterparts on the other side: same stem, or a
    WordNet synonym among the words the other side has *instead* (not ones both share:
    "shooting" must not pair with the "flash" both questions have)."""
    same = [neg for w, neg in other.words if guard.same_word(word, w)]
    if same or lexicon is None or not lexicon.loaded:
        return same
    return [neg for w, neg in other.words
            if not any(guard.same_word(w, x) for x, _ in own.words) and lexicon.synonyms(word, w)]


def _flipped_word(a: Reading, b: Reading, lexicon: Synonyms | None) -> str | None:
    """A word both sides share, negated on one side only."""
    for word, neg in a.words:
        partners = _partner(word, a, b, lexicon)
        if partners and neg not in partners and all(
                n == neg for w, n in a.words if guard.same_word(w, word)):
            return word
    return None


def morphological_opposite(a: str, b: str, lexicon: Synonyms | None = None) -> bool:
    """``a`` and ``b`` are one stem under opposed prefixes (undo/redo, like/dislike);
    a stem shorter than 3 letters must be a word WordNet knows ("do")."""
    for pa, pb in _OPPOSED:
        for x, y in ((a, b), (b, a)):
            if not (x.startswith(pa) and y.startswith(pb)):
                continue
            stem = x[len(pa):]
            if stem != y[len(pb):] or len(stem) < 2:
                continue
            if len(stem) >= 4 or (lexicon is not None and lexicon.loaded and lexicon.known(stem)):
                return True
    return False


def _readings(query: str, cached: str) -> tuple[Reading, Reading]:
    return (read(query, _substitutes(cached)), read(cached, _substitutes(query)))


def _substitutes(text: str) -> bool:
    low = text.lower()
    return any(s in low for s in _SUBSTITUTES)


def differs(query: str, cached: str, lexicon: Synonyms | None = None) -> str | None:
    """Why the two requests have opposite polarity, or None when they agree."""
    rq, rc = _readings(query, cached)
    for a, b in ((rq, rc), (rc, rq)):
        word = _flipped_word(a, b, lexicon)
        if word is not None:
            return f"polarity: {word!r} negated on one side only"
    if rq.strong % 2 != rc.strong % 2 and (rq.strong + rq.weak) % 2 != (rc.strong + rc.weak) % 2:
        # a failure word answers a "not": "did not go through" / "why did it fail"
        return f"polarity: negation cues {rq.strong} vs {rc.strong}"
    roles = swapped_roles(query, cached)
    if roles is not None:
        return roles
    wq = {w for w, _ in rq.words}
    wc = {w for w, _ in rc.words}
    for x in sorted(wq - wc):
        for y in sorted(wc - wq):
            if morphological_opposite(x, y, lexicon):
                return f"polarity: opposite words {x} vs {y}"
    return None


def _sides(text: str, pivot: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """Content stems before and after the first ``pivot`` word, or None without one."""
    tokens = [t for t in _tokens(text) if t not in _PUNCT]
    if pivot not in tokens:
        return None
    k = tokens.index(pivot)
    stems = [(i, guard._stem(t)) for i, t in enumerate(tokens) if _content(t)]
    return frozenset(st for i, st in stems if i < k), frozenset(st for i, st in stems if i > k)


def swapped_roles(query: str, cached: str) -> str | None:
    """The same words with two of them on opposite sides of the same pivot: "convert a
    string column to datetime" / "convert a datetime column to strings", "substitute
    soda for powder" / "substitute powder for soda": the direction is reversed."""
    for pivot in _PIVOTS:
        sq, sc = _sides(query, pivot), _sides(cached, pivot)
        if sq is None or sc is None or sq[0] | sq[1] != sc[0] | sc[1]:
            continue
        moved_right = sq[0] & sc[1] - sc[0]
        moved_left = sq[1] & sc[0] - sc[1]
        if moved_right and moved_left:
            return f"polarity: {sorted(moved_right)[0]} and {sorted(moved_left)[0]} swap sides of {pivot!r}"
    return None


def same_polarity(query: str, cached: str, lexicon: Synonyms | None = None) -> bool:
    """Both questions have as many negation cues, weak ones included, and no shared word
    flips: the guard's raw negator count may then be ignored ("can't log in" /
    "unable to sign in")."""
    rq, rc = _readings(query, cached)
    if rq.strong + rq.weak != rc.strong + rc.weak:
        return False  # as many cues each side: "no longer work here and can't log in" is not one "not"
    return _flipped_word(rq, rc, lexicon) is None and _flipped_word(rc, rq, lexicon) is None
