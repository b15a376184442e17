"""pion-serve's check of a similarity hit: the guard's word rules (``--verifier guard``,
the default) or the aligned verifier (``--verifier aligned``), for which WordNet is
loaded once on a worker thread so the event loop never parses it; until it is loaded
the guard decides.
"""

from __future__ import annotations

import asyncio

from pion.proxy import guard
from pion.proxy.verifier import Verdict, Verifier, from_guard


class HitVerifier:
    """One per app; ``verify`` is called once per similarity hit (about a millisecond of CPU)."""

    def __init__(self, mode: str = "guard", verifier: Verifier | None = None) -> None:
        self.mode = mode
        self.verifier = verifier or Verifier()
        self._loading: asyncio.Future[bool] | None = None

    async def load(self) -> bool:
        """Load WordNet on a worker thread; safe to call repeatedly and concurrently."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(asyncio.to_thread(self.verifier.load))
        return await asyncio.shield(self._loading)

    def describe(self) -> dict[str, object]:
        """For /v1/stats: the mode, and whether the aligned verifier is deciding yet."""
        return {"verifier": self.mode,
                "verifier_ready": self.mode == "guard" or self.verifier.lexicon.loaded}

    async def verify(self, query: str, cached: str, similarity: float) -> Verdict:
        """May the answer cached for ``cached`` be served for ``query``?"""
        if self.mode == "aligned" and self.verifier.lexicon.loaded:
            return self.verifier.check(query, cached, similarity)
        if self.mode == "aligned" and self._loading is None:
            self._loading = asyncio.ensure_future(asyncio.to_thread(self.verifier.load))
        # Until WordNet is in memory (seconds after start) the stricter guard decides:
        # a request never waits for the load.
        return from_guard(guard.check(query, cached))
