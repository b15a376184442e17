"""pion-serve's check of a similarity hit: the guard's word rules (``--verifier guard``),
the aligned verifier (``--verifier aligned``), the learned verifier (``--verifier
learned``) or the cross-encoder (``--verifier cross``, the default since issue 18's sixth
round). WordNet (and for ``learned``/``cross`` the MiniLM models) is loaded once on a worker
thread so the event loop never parses it; until it is loaded the guard decides.

An install without the model extras (``pion[proxy]`` alone: no torch, safetensors or
MiniLM) cannot run ``learned``/``cross``: pion-serve then logs why once and the guard keeps
deciding (``/v1/stats`` says ``verifier_ready: false`` and the reason), rather than
refusing to start on its own default.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from pion.proxy import guard
from pion.proxy.cross_verifier import CrossVerifier
from pion.proxy.learned_verifier import LearnedVerifier
from pion.proxy.verifier import Verdict, Verifier, from_guard

_log = logging.getLogger("pion.serve")


class HitVerifier:
    """One per app; ``verify`` is called once per similarity hit (about a millisecond of CPU
    for ``aligned``; a MiniLM pass over the two questions, on a worker thread, for ``learned``)."""

    def __init__(self, mode: str = "guard", verifier: Verifier | None = None) -> None:
        self.mode = mode
        self.verifier = verifier or Verifier()
        self.unavailable: str | None = None  # why the chosen model verifier cannot load
        self.cross: CrossVerifier | None = None
        if mode == "cross":
            try:
                self.cross = CrossVerifier(verifier=self.verifier)
            except (ImportError, OSError, ValueError) as exc:
                self._give_up(exc)
        self.learned: LearnedVerifier | None = \
            LearnedVerifier(verifier=self.verifier) if mode == "learned" else \
            self.cross.learned if self.cross is not None else None
        self._loading: asyncio.Future[bool] | None = None

    def _give_up(self, exc: BaseException) -> None:
        self.unavailable = f"{type(exc).__name__}: {exc}"
        _log.warning("--verifier %s cannot load (%s; it needs pion[embed,runtime]); the guard decides",
                     self.mode, self.unavailable)

    def _load(self) -> bool:
        try:
            if self.cross is not None:
                return self.cross.load()
            if self.mode == "cross":
                return False  # could not even be built: _give_up said why
            return self.learned.load() if self.learned is not None else self.verifier.load()
        except (ImportError, OSError) as exc:
            self._give_up(exc)
            return False

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
        doc: dict[str, object] = {"verifier": self.mode, "verifier_ready": self.ready}
        if self.unavailable is not None:
            doc["verifier_unavailable"] = self.unavailable
        return doc

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
