"""Which warm prefixes a front can serve without asking the cold tier (docs/scale-out.md).

A warm copy is *trusted* when this front knows its generation and has been subscribed to the
invalidation channel without a gap since it learnt it: any DROP or re-registration elsewhere
would then have reached it. Anything else (no subscription yet, a subscription lost and
regained, a copy recovered from the WAL with no known generation) is re-checked once against
the cold index on its next LOOKUP — one round trip, then trusted again.
"""

from __future__ import annotations


class Freshness:
    """Generations of this front's warm prefixes and whether each is vouched for."""

    def __init__(self) -> None:
        self.gens: dict[str, str | None] = {}  # ns -> generation of the copy held here
        self.own: set[str] = set()  # of those, registered on this front (not promoted)
        self.unverified: set[str] = set()  # held since before the last (re)subscription
        self.subscribed = False

    def held(self, ns: str, gen: str | None, own: bool | None = None) -> None:
        """This front now holds ``ns`` at ``gen``: registered here (``own`` True), promoted
        (False) or re-checked (None: unchanged)."""
        self.gens[ns] = gen
        self.unverified.discard(ns)
        if own is True:
            self.own.add(ns)
        elif own is False:
            self.own.discard(ns)

    def forget(self, ns: str) -> None:
        self.gens.pop(ns, None)
        self.unverified.discard(ns)
        self.own.discard(ns)

    def stale(self, ns: str, gen: str | None) -> bool:
        """Another front announced ``ns`` at ``gen`` (None: dropped): is our copy now stale?

        A drop always makes it stale. A registration elsewhere makes a *promoted* copy of another
        generation stale; a copy this front registered itself is kept: two fronts that prefill the
        same prompt at once both register it (a content-hash namespace: the same rows), and
        neither may lose the copy it is still writing."""
        if gen is None:
            return True
        return ns not in self.own and self.gens.get(ns) != gen

    def trusted(self, ns: str) -> bool:
        return self.subscribed and ns in self.gens and ns not in self.unverified

    def subscription(self, up: bool) -> None:
        """The subscriber's report: every (re)subscription may follow missed messages, so every
        copy held so far is re-checked once; while down, nothing is trusted."""
        if up:
            self.unverified = set(self.gens)
        self.subscribed = up
