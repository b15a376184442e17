"""Full text for TEXT fields: the analyser and a BM25-ranked inverted index.

Analyser (RediSearch's defaults): split on whitespace and RediSearch's punctuation
separators, lower-case, drop stop words, stem with the Snowball English stemmer (the
maintained ``snowballstemmer`` package; ``NOSTEM`` fields keep the word). Query terms go
through the same analyser, so ``running`` finds ``runs``.

Stop words: RediSearch's documented default list (``DEFAULT_STOPWORDS`` below, the
Lucene English set RediSearch ships) unless FT.CREATE gives ``STOPWORDS n w...``
(``STOPWORDS 0``: none). It is the protocol's constant, kept so a query behaves as it
does against RediSearch, not a list we tuned.

Scoring is Okapi BM25 (k1 = 1.2, b = 0.75) per TEXT field, multiplied by the field's
WEIGHT and summed over fields and query terms (RediSearch's BM25STD, the Redis 8 default).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from functools import cache
from typing import Any

DEFAULT_STOPWORDS = frozenset((
    "a", "is", "the", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in",
    "into", "it", "no", "not", "of", "on", "or", "such", "that", "their", "then", "there",
    "these", "they", "this", "to", "was", "will", "with"))
# RediSearch's default separators: these characters and whitespace split tokens.
SEPARATORS = re.compile(r"[\s,.<>{}\[\]\"':;!@#$%^&*()\-+=~/\\|?`]+")
BM25_K1 = 1.2
BM25_B = 0.75


@cache
def _stemmer() -> Any:
    """The English stemmer, built on first use: the package's import costs every server start
    ~50 ms of CPU, and most servers never index text."""
    import snowballstemmer
    return snowballstemmer.stemmer("english")


class Analyzer:
    """Text -> index terms; one per index (its stop words)."""

    def __init__(self, stopwords: frozenset[str] = DEFAULT_STOPWORDS) -> None:
        self.stopwords = stopwords

    def tokens(self, text: str) -> list[str]:
        """Lower-cased words, stop words removed (not stemmed)."""
        return [t for t in SEPARATORS.split(text.lower()) if t and t not in self.stopwords]

    def terms(self, text: str, stem: bool = True) -> list[str]:
        words = self.tokens(text)
        return _stemmer().stemWords(words) if stem else words

    @staticmethod
    def stem_all(words: list[str]) -> list[str]:
        return list(_stemmer().stemWords(words))

    @staticmethod
    def stem(word: str) -> str:
        return str(_stemmer().stemWord(word.lower()))


class TextField:
    """One TEXT field's postings: term -> {doc id: term frequency}, and positions for phrases.

    ``postings`` hold stems (the words themselves under NOSTEM); ``exact`` holds the words as
    written, for matches RediSearch does not expand (a negated term: ``-stones`` excludes
    "stones", not "stone").
    """

    def __init__(self, weight: float, stem: bool) -> None:
        self.weight = weight
        self.stem = stem
        self.postings: dict[str, dict[int, int]] = defaultdict(dict)
        self.exact: dict[str, set[int]] = defaultdict(set)
        self.positions: dict[tuple[str, int], list[int]] = {}
        self.doc_terms: dict[int, list[str]] = {}
        self.doc_words: dict[int, set[str]] = {}
        self.total_len = 0

    @property
    def n_docs(self) -> int:
        return len(self.doc_terms)

    def add(self, doc: int, terms: list[str], words: list[str] | None = None) -> None:
        """Index ``doc``: ``terms`` as searched (stems), ``words`` as written (exact matches)."""
        self.remove(doc)
        self.doc_terms[doc] = terms
        self.doc_words[doc] = set(terms if words is None else words)
        for word in self.doc_words[doc]:
            self.exact[word].add(doc)
        self.total_len += len(terms)
        for pos, term in enumerate(terms):
            posting = self.postings[term]
            posting[doc] = posting.get(doc, 0) + 1
            self.positions.setdefault((term, doc), []).append(pos)

    def remove(self, doc: int) -> None:
        terms = self.doc_terms.pop(doc, None)
        if terms is None:
            return
        self.total_len -= len(terms)
        for word in self.doc_words.pop(doc, ()):
            holders = self.exact.get(word)
            if holders is not None:
                holders.discard(doc)
                if not holders:
                    del self.exact[word]
        for term in set(terms):
            posting = self.postings.get(term)
            if posting is not None:
                posting.pop(doc, None)
                if not posting:
                    del self.postings[term]
            self.positions.pop((term, doc), None)

    def prefix_matching(self, prefix: str) -> dict[int, float]:
        """Docs holding a word (as written) that starts with ``prefix`` -> BM25 of its stem."""
        words = [w for w in self.exact if w.startswith(prefix)]
        holders = set().union(*(self.exact[w] for w in words)) if words else set()
        stems = {str(_stemmer().stemWord(w)) if self.stem else w for w in words}
        scores: dict[int, float] = {}
        for stem in stems:
            for doc, score in self.matching(stem).items():
                if doc in holders:
                    scores[doc] = scores.get(doc, 0.0) + score
        return scores

    def matching(self, term: str) -> dict[int, float]:
        """Docs holding ``term`` -> weighted BM25 score."""
        keys = [term] if term in self.postings else []
        scores: dict[int, float] = {}
        n = self.n_docs
        avg_len = self.total_len / n if n else 1.0
        for key in keys:
            posting = self.postings[key]
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for doc, tf in posting.items():
                dl = len(self.doc_terms[doc])
                score = idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * dl / avg_len))
                scores[doc] = scores.get(doc, 0.0) + score * self.weight
        return scores

    def phrase(self, terms: list[str]) -> set[int]:
        """Docs where ``terms`` occur next to each other, in order."""
        if not terms:
            return set()
        docs = set(self.postings.get(terms[0], {}))
        for term in terms[1:]:
            docs &= set(self.postings.get(term, {}))
        found = set()
        for doc in docs:
            starts = set(self.positions[(terms[0], doc)])
            for offset, term in enumerate(terms[1:], start=1):
                starts &= {p - offset for p in self.positions[(term, doc)]}
            if starts:
                found.add(doc)
        return found

    @property
    def n_terms(self) -> int:
        return len(self.postings)
