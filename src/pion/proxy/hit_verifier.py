"""pion-serve's check of a similarity hit: the guard's word rules (``--verifier guard``,
the default), the aligned verifier (``--verifier aligned``), the learned verifier
(``--verifier learned``) or the cross-encoder (``--verifier cross``). WordNet (and for
``learned``/``cross`` the MiniLM models) is loaded once on a worker thread so the event
loop never parses it; until it is loaded the guard decides.
"""

from __future__ import annotations

import asyncio

import numpy as np

from pion.proxy import guard
from pion.proxy.cross_verifier import CrossVerifier
from pion.proxy.learned_verifier import LearnedVerifier
from pion.proxy.verifier import Verdict, Verifier, from_guard


class HitVerifier:
    """One per app; ``verify`` is called once per similarity hit (about a millisecond of CPU
    for ``aligned``; a MiniLM pass over the two questions, on a worker thread, for ``learned``)."""

    def __init__(self, mode: str = "guard", verifier: Verifier | None = None) -> None:
        self.mode = mode
        self.verifier = verifier or Verifier()
        self.cross: CrossVerifier | None = CrossVerifier(verifier=self.verifier) if mode == "cross" else None
        self.learned: LearnedVerifier | None = \
            LearnedVerifier(verifier=self.verifier) if mode == "learned" else \
            self.cross.learned if self.cross is not None else None
        self._loading: asyncio.Future[bool] | None = None

    def _load(self) -> bool:
        if self.cross is not None:
            return self.cross.load()
        return self.learned.load() if self.learned is not None else self.verifier.load()

    @property
    def ready(self) -> bool:
        """Whether the chosen verifier (not the guard standing in for it) decides."""
        if self.cross is not None:
            return self.cross.loaded
        if self.learned is not None:
            return self.learned.loaded
        return self.mode == "guard" or self.verifier.lexicon.loaded

    async def load(self) -> bool:
        """Load WordNet (and MiniLM) on a worker thread; safe to call repeatedly and concurrently."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(asyncio.to_thread(self._load))
        return await asyncio.shield(self._loading)

    def describe(self) -> dict[str, object]:
        """For /v1/stats: the mode, and whether the chosen verifier is deciding yet."""
        return {"verifier": self.mode, "verifier_ready": self.ready}

    async def query_vector(self, text: str) -> np.ndarray | None:
        """``--verifier learned`` (or ``cross`` after the learned score), loaded: the
        question's MiniLM sentence vector from the pass
        that also yields its token states (kept for the check of a hit), so one forward pass
        serves both the lookup (sent as VECTOR: the server does not embed again) and the
        verifier. None otherwise: the server embeds as before."""
        if self.learned is None or not self.learned.loaded:
            return None
        encoded = await asyncio.to_thread(self.learned.encode, [text])
        return encoded[0].sentence

    async def verify(self, query: str, cached: str, similarity: float) -> Verdict:
        """May the answer cached for ``cached`` be served for ``query``?"""
        if self.mode != "guard" and self.ready:
            if self.cross is not None:
                return await asyncio.to_thread(self.cross.check, query, cached, similarity)
            if self.learned is not None:
                return await asyncio.to_thread(self.learned.check, query, cached, similarity)
            return self.verifier.check(query, cached, similarity)
        if self.mode != "guard" and self._loading is None:
            self._loading = asyncio.ensure_future(asyncio.to_thread(self._load))
        # Until the verifier's data is in memory (seconds after start) the stricter guard
        # decides: a request never waits for the load.
        return from_guard(guard.check(query, cached))
