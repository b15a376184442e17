"""``pion-serve --verifier learned``: a logistic score over MiniLM token alignment.

The aligned verifier's WordNet misses opposite actions that are not listed antonyms
(read/write, undo/redo) and refuses rewordings WordNet does not relate. This verifier
keeps its hard gates (numbers, dates, negation, antonyms, named entities, direction:
right whenever they fire) and replaces the word-list decision with a score:

  features = ``token_align.features`` (sentence cosine and BERTScore-style best-match
  statistics of content words and of every word, both directions) + the WordNet
  alignment counts (``verifier.Verifier.align``) + whether the aligned verifier serves +
  whether the two questions' action directions differ (``opposites.actions``);
  score = sigmoid(coef . (features - mean) / scale + intercept); serve when the sentence
  cosine is at least ``floor`` and the score at least ``threshold``.

The weights file (``learned_verifier.json``, about 2 KB) is written by
``benchmarks/train_l1_verifier.py``: coefficients fitted on the train split only (plus
synthetic swapped-word traps made from train questions: the train split's own traps
rarely showed an opposite action that passes the hard gates), the floor, regularisation
and threshold chosen on the dev split (traps served <= 1.5% of dev pairs, none of the
dev conversations), the test split only scored. Format (JSON, floats at full precision)::

    {"version": 1, "features": ["cos", ...], "mean": [...], "scale": [...],
     "coef": [...], "intercept": 2.27, "floor": 0.65, "threshold": 0.77, "trained_on": "..."}
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pion.proxy import opposites
from pion.proxy.token_align import FEATURES, Encoded, TokenEncoder, features
from pion.proxy.verifier import Verdict, Verifier

WEIGHTS = Path(__file__).with_name("learned_verifier.json")
WEIGHTS_VERSION = 1
# Features the verifier adds to ``token_align.FEATURES`` from the WordNet alignment.
EXTRA_FEATURES = ("wn_unaligned", "wn_one_side", "aligned_ok", "directions_differ")
ALL_FEATURES = (*FEATURES, *EXTRA_FEATURES)
_ENCODED_CACHE = 4096  # cached questions' encodings kept: a popular entry is encoded once


@dataclass(frozen=True, slots=True)
class LearnedWeights:
    """A fitted logistic score and its decision rule (see the module docstring)."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    floor: float
    threshold: float

    def score(self, x: np.ndarray) -> float:
        """Probability-like score in (0, 1) that the pair is a paraphrase."""
        z = float(self.coef @ ((x - self.mean) / self.scale)) + self.intercept
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))

    def to_json(self, trained_on: str) -> str:
        return json.dumps({"version": WEIGHTS_VERSION, "features": list(ALL_FEATURES),
                           "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                           "coef": self.coef.tolist(), "intercept": self.intercept,
                           "floor": self.floor, "threshold": self.threshold,
                           "trained_on": trained_on}, indent=1) + "\n"


def load_weights(path: Path = WEIGHTS) -> LearnedWeights:
    """Read a weights file; ValueError names what does not match this code's features."""
    doc = json.loads(path.read_text())
    if doc.get("version") != WEIGHTS_VERSION:
        raise ValueError(f"{path}: weights version {doc.get('version')!r}, expected {WEIGHTS_VERSION}")
    if tuple(doc["features"]) != ALL_FEATURES:
        raise ValueError(f"{path}: features {doc['features']} differ from {list(ALL_FEATURES)}; retrain")
    arrays = [np.asarray(doc[k], dtype=np.float64) for k in ("mean", "scale", "coef")]
    if any(a.shape != (len(ALL_FEATURES),) for a in arrays):
        raise ValueError(f"{path}: mean/scale/coef must each have {len(ALL_FEATURES)} entries")
    return LearnedWeights(arrays[0], arrays[1], arrays[2], float(doc["intercept"]), float(doc["floor"]),
                          float(doc["threshold"]))


def pair_features(verifier: Verifier, query: Encoded, cached: Encoded) -> np.ndarray:
    """``ALL_FEATURES`` of a pair whose hard checks passed."""
    al = verifier.align(query.text, cached.text)
    nq, nc = len(al.only_query), len(al.only_cached)
    aligned_ok = verifier.decide(float(query.sentence @ cached.sentence), al).ok
    # Action directions that differ without opposing outright ("hide the forum" / "find
    # the forum", "stop the alerts" / "follow the alerts"): evidence the hard check leaves.
    differ = opposites.actions(query.text).directions != opposites.actions(cached.text).directions
    return np.concatenate([features(query, cached), [float(nq + nc), float((nq == 0) != (nc == 0)),
                                                     float(aligned_ok), float(differ)]])


class LearnedVerifier:
    """Hard gates, then the learned score; thread-safe after ``load`` (the encoder locks)."""

    def __init__(self, weights: LearnedWeights | None = None, verifier: Verifier | None = None,
                 encoder: TokenEncoder | None = None) -> None:
        self.weights = weights if weights is not None else load_weights()
        self.verifier = verifier if verifier is not None else Verifier()
        self.encoder = encoder if encoder is not None else TokenEncoder(threads=1)
        self._encoded: OrderedDict[str, Encoded] = OrderedDict()
        self._cache_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self.verifier.lexicon.loaded and self.encoder.loaded

    def load(self) -> bool:
        """Load WordNet and MiniLM (seconds); True when both are ready."""
        self.verifier.load()
        self.encoder.load()
        return self.loaded

    def encode(self, texts: list[str]) -> list[Encoded]:
        """Encodings of ``texts``, one forward pass for those not cached yet. Called from
        worker threads, so the cache is only touched under its lock."""
        with self._cache_lock:
            found = {t: self._encoded[t] for t in texts if t in self._encoded}
            for t in found:
                self._encoded.move_to_end(t)
        todo = [t for t in dict.fromkeys(texts) if t not in found]
        fresh = {enc.text: enc for enc in self.encoder.encode(todo)} if todo else {}
        with self._cache_lock:
            self._encoded.update(fresh)
            while len(self._encoded) > _ENCODED_CACHE:
                self._encoded.popitem(last=False)
        return [found[t] if t in found else fresh[t] for t in texts]

    def forget(self) -> None:
        """Drop the kept encodings (benchmarks time the uncached path with this)."""
        with self._cache_lock:
            self._encoded.clear()

    def score(self, query: str, cached: str) -> float:
        """The learned score of a pair (hard checks not applied)."""
        q, c = self.encode([query, cached])
        return self.weights.score(pair_features(self.verifier, q, c))

    def check(self, query: str, cached: str, similarity: float) -> Verdict:
        """May the answer cached for ``cached`` be served for ``query``? ``similarity`` is
        the cosine the lookup found (pion-server's vectors: the same model)."""
        hard = self.verifier.hard_check(query, cached)
        if not hard.ok:
            return hard
        if similarity < self.weights.floor:
            return Verdict(False, "low_score", f"cosine {similarity:.3f} under the floor {self.weights.floor}",
                           "verifier")
        s = self.score(query, cached)
        if s < self.weights.threshold:
            return Verdict(False, "low_score", f"score {s:.3f} under {self.weights.threshold:.3f}", "verifier")
        return Verdict(True)
