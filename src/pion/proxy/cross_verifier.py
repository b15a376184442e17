"""``pion-serve --verifier cross``: the hard checks, then a cross-encoder reads both questions.

Order, cheapest and surest first:
  1. the hard checks of ``verifier.Verifier.hard_check`` (numbers, dates, negation,
     antonyms, names, direction, opposite actions): right whenever they fire, refusals
     count as ``refused_by_guard``;
  2. the candidate floor (the sentence cosine the lookup found) from the weights file;
  3. when the weights file says so (``learned_threshold``, chosen on dev), the learned
     score of ``learned_verifier.py`` at that threshold, which may be lower than
     ``--verifier learned``'s own: the cross-encoder behind it refuses what the looser
     score lets through (reason ``low_score``);
  4. the cross-encoder (``cross_encoder.py``): P(same answer) of ``[CLS] cached [SEP] new``
     under the threshold chosen on dev refuses with reason ``cross_score``.

Only candidates that passed the vector search and the hard checks reach the model, so a
miss costs nothing extra and a hit one forward pass over the two questions.
"""

from __future__ import annotations

from pathlib import Path

from pion.proxy.cross_encoder import CROSS_WEIGHTS, CrossEncoder
from pion.proxy.learned_verifier import LearnedVerifier
from pion.proxy.verifier import Verdict, Verifier


def _normal(text: str) -> str:
    return " ".join(text.lower().split()).rstrip("?.! ")


class CrossVerifier:
    """Hard checks, floor, optional learned score, cross-encoder; thread-safe after ``load``."""

    def __init__(self, verifier: Verifier | None = None, cross: CrossEncoder | None = None,
                 weights: Path = CROSS_WEIGHTS) -> None:
        self.verifier = verifier if verifier is not None else Verifier()
        # Two intra-op threads (process-wide in torch, so the MiniLM lookup pass gets them
        # too): a hit's p50 fell from 17.2 to 13.7-15.1 ms on this 2-core box with the same
        # probabilities to the last bit (docs/proxy.md, sixth round).
        self.cross = cross if cross is not None else CrossEncoder(weights, threads=2)
        self.learned: LearnedVerifier | None = \
            LearnedVerifier(verifier=self.verifier) if self.cross.meta.after_learned else None

    @property
    def loaded(self) -> bool:
        learned_ok = self.learned is None or self.learned.loaded
        return self.verifier.lexicon.loaded and self.cross.loaded and learned_ok

    def load(self) -> bool:
        """WordNet, the cross-encoder (and MiniLM's token encoder when stacked): seconds."""
        if self.learned is not None:
            self.learned.load()
        else:
            self.verifier.load()
        self.cross.load()
        return self.loaded

    def check(self, query: str, cached: str, similarity: float) -> Verdict:
        """May the answer cached for ``cached`` be served for ``query``? ``similarity`` is
        the cosine the lookup found."""
        front = self.check_front(query, cached, similarity)
        if front is not None:
            return front
        if _normal(query) == _normal(cached):
            return Verdict(True)  # the same words: nothing for the model to read
        meta = self.cross.meta
        p = self.cross.probability(cached, query)
        if p < meta.threshold:
            return Verdict(False, "cross_score", f"cross-encoder {p:.3f} under {meta.threshold:.3f}", "verifier")
        return Verdict(True)

    def check_front(self, query: str, cached: str, similarity: float) -> Verdict | None:
        """The refusal of a stage in front of the cross-encoder, or None when the pair
        reaches it (the evaluation batches the model calls with this)."""
        meta = self.cross.meta
        hard = self.verifier.hard_check(query, cached)
        if not hard.ok:
            return hard
        floor = meta.floor if self.learned is None else max(meta.floor, self.learned.weights.floor)
        if similarity < floor:
            return Verdict(False, "low_score", f"cosine {similarity:.3f} under the floor {floor}", "verifier")
        if self.learned is not None and meta.learned_threshold is not None:
            s = self.learned.score(query, cached)
            if s < meta.learned_threshold:
                return Verdict(False, "low_score", f"score {s:.3f} under {meta.learned_threshold:.3f}", "verifier")
        return None
