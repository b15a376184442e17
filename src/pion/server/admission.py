"""KV.PREFIX.REGISTER admission: ``--admission always|2hit``.

Under ``2hit`` a namespace is admitted on its second registration, not its first (the A1-out
"ghost" queue of 2Q, and CDN "second hit caching"): a prefix seen once is most often a one-off
(a unique conversation), and storing it costs a full K/V write that evicts prefixes that do
repeat. The first ``KV.PREFIX.REGISTER`` of a namespace records only its name in a bounded ghost
list and answers ``+DEFERRED`` — the client prefills locally and stores nothing; a second
REGISTER while the name is still in the list answers ``+OK`` and the prefix is stored as usual.

The ghost list holds at most ``--admission-window`` names (the oldest is forgotten first) and is
not persisted: it is a few bytes per name, and after a restart a prefix is simply deferred once
more. Re-registering a namespace that is already held is never deferred. Only the KV.PREFIX
registration is gated; raw ``V.CREATE`` sessions are the caller's own business.

Under ``pion-server -w N`` (shared mode) the workers share one ghost list
(``workers/ghosts.py``, in shared memory), so a namespace deferred on worker 0 is admitted on
its second registration whichever worker that reaches; its eviction is a ring of the last
``--admission-window`` deferrals (the same bound), and ``admission_ghost_entries`` /
``admission_ghost_evictions`` are the group's.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pion.server.workers.ghosts import SharedGhosts

POLICIES = ("always", "2hit")


class Admission:
    """One worker's admission policy and its ghost list (names only, never K/V bytes); with
    ``shared`` (``-w N``), the group's list instead of this process's own."""

    def __init__(self, policy: str = "always", window: int = 65536, shared: SharedGhosts | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"admission policy must be one of {POLICIES}, got {policy!r}")
        if window < 1:
            raise ValueError(f"admission window must be >= 1, got {window}")
        self.policy = policy
        self.window = window
        self._ghosts: OrderedDict[str, None] = OrderedDict()
        self._evictions = 0  # names forgotten before their second registration
        self.shared = shared if policy == "2hit" else None

    @property
    def two_hit(self) -> bool:
        return self.policy == "2hit"

    def should_defer(self, ns: str, held: bool) -> bool:
        """Decide one valid REGISTER of ``ns`` (``held``: already registered). A deferral records
        ``ns`` in the ghost list; an admission leaves it there until ``admitted`` is called, so a
        registration that then fails (OOM) is not lost from the list."""
        if not self.two_hit or held:
            return False
        if self.shared is not None:
            return self.shared.sight(ns)
        if ns in self._ghosts:
            return False
        ghosts = self._ghosts
        ghosts[ns] = None
        if len(ghosts) > self.window:
            ghosts.popitem(last=False)
            self._evictions += 1
        return True

    def admitted(self, ns: str) -> None:
        """``ns`` was registered: it leaves the ghost list."""
        if self.shared is not None:
            self.shared.admitted(ns)
        else:
            self._ghosts.pop(ns, None)

    def clear(self) -> None:
        """FLUSHALL forgets the ghosts too (nothing about old namespaces survives it)."""
        self._ghosts.clear()
        if self.shared is not None:
            self.shared.clear()

    @property
    def ghost_entries(self) -> int:
        return self.shared.entries if self.shared is not None else len(self._ghosts)

    @property
    def ghost_evictions(self) -> int:
        return self.shared.evictions if self.shared is not None else self._evictions
