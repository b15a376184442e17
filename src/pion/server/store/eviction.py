"""``--maxmemory-policy``: which keyspace keys leave, across every database, when a write would
pass ``--maxmemory`` — Redis's policies and its sampled approximation.

Redis does not keep keys in exact LRU/LFU order; each eviction samples ``maxmemory-samples``
keys per database, merges them into a pool of the 16 best candidates kept between evictions
(``EVPOOL_SIZE``), and evicts the best one still present. We do the same over the
``KeyTracker`` pools (``store/key_tracking.py``) for every policy but ``allkeys-lru``, which is
exact: each database keeps its keys in access order (an ``OrderedDict``, a C move-to-end per
access) and the oldest head across databases goes. Measured in ``benchmarks/bench_eviction.py``:
the same hit ratio as sampling, ~10x less time per operation in Python.

Policies (Redis's meanings): ``noeviction`` (a write that does not fit gets -OOM),
``allkeys-lru``, ``allkeys-lfu``, ``allkeys-random``, ``volatile-lru``, ``volatile-lfu``,
``volatile-random``, ``volatile-ttl`` (volatile-*: only keys with a TTL, nearest deadline first
for ttl). An evicted key is logged as a DEL (replay removes it too) and counted in
``evicted_keys``. The V-store's own whole-prefix LRU is not this module's (``store/vstore.py``):
``Stores`` decides which side gives room first.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from pion.server.store.key_tracking import KeyTracker
from pion.server.store.keyspace import Keyspace, entry_bytes

POLICIES = ("noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru",
            "volatile-lfu", "volatile-random", "volatile-ttl")
DEFAULT_POLICY = "allkeys-lru"
DEFAULT_SAMPLES = 5  # Redis's maxmemory-samples default
EVPOOL_SIZE = 16  # Redis's eviction pool


def tracker_mode(policy: str) -> str:
    if policy.endswith("-lru"):
        return "lru"
    if policy.endswith("-lfu"):
        return "lfu"
    return "plain"


class Evictor:
    """Evicts keyspace keys from ``dbs`` by ``policy`` (see the module docstring)."""

    def __init__(self, dbs: Sequence[Keyspace], policy: str = DEFAULT_POLICY,
                 samples: int = DEFAULT_SAMPLES) -> None:
        self.dbs = dbs
        self.policy = policy
        self.samples = samples
        self.evicted_keys = 0
        self.enabled = False
        self._pool: list[tuple[float, int, bytes]] = []  # (score, db, key), best last
        self._clock = itertools.count(1).__next__  # LRU ticks, shared by every database

    def configure(self, policy: str, samples: int, budget: int) -> None:
        """Apply a policy and the budget it serves; tracking runs only while it can evict."""
        enabled = budget > 0 and policy != "noeviction"
        mode = tracker_mode(policy)
        if enabled and (not self.enabled or mode != tracker_mode(self.policy)):
            for ks in self.dbs:
                ks.set_tracker(None)
                ks.set_tracker(KeyTracker(mode, self._clock))
        elif not enabled:
            for ks in self.dbs:
                ks.set_tracker(None)
        self.policy, self.samples, self.enabled = policy, samples, enabled
        self._pool.clear()

    @property
    def volatile(self) -> bool:
        return self.policy.startswith("volatile-")

    def evictable_bytes(self) -> int:
        """Bytes the policy could free by evicting every key it may evict."""
        if not self.enabled:
            return 0
        if not self.volatile:
            return sum(ks.used_bytes for ks in self.dbs)
        total = 0
        for ks in self.dbs:
            if ks.tracker is None:
                continue
            for key in ks.tracker.volatile.keys():
                value = ks.peek(key)
                if value is not None:
                    total += entry_bytes(key, value)
        return total

    def evict(self, need: int) -> int:
        """Evict keys until ``need`` bytes are freed or none is left to evict; bytes freed."""
        freed = 0
        while freed < need:
            got = self.evict_one()
            if got == 0:
                break
            freed += got
        return freed

    def evict_one(self) -> int:
        """Evict the policy's best candidate; the bytes it freed (0: nothing evictable)."""
        if not self.enabled:
            return 0
        if self.policy.endswith("-random"):
            return self._evict_random()
        if self.policy == "allkeys-lru":
            return self._evict_oldest()
        self._populate()
        while self._pool:
            _, db, key = self._pool.pop()
            ks = self.dbs[db]
            tracker = ks.tracker
            if tracker is None or key not in tracker:
                continue
            if self.volatile and key not in tracker.volatile:
                continue
            return self._evict(ks, key)
        return 0

    def _populate(self) -> None:
        pool = {(db, key): score for score, db, key in self._pool}
        for db, ks in enumerate(self.dbs):
            tracker = ks.tracker
            if tracker is None:
                continue
            source = tracker.volatile if self.volatile else tracker.all
            for key in source.sample(self.samples) if source else ():
                pool[(db, key)] = tracker.score(key, self.policy, ks.expire_at_ms(key))
        best = sorted((score, db, key) for (db, key), score in pool.items())
        self._pool = best[-EVPOOL_SIZE:]

    def _evict_oldest(self) -> int:
        best: tuple[int, Keyspace, bytes] | None = None
        for ks in self.dbs:
            tracker = ks.tracker
            head = None if tracker is None else tracker.oldest()
            if head is None:
                continue
            key, tick = head
            if best is None or tick < best[0]:
                best = (tick, ks, key)
        return 0 if best is None else self._evict(best[1], best[2])

    def _evict_random(self) -> int:
        weights = []
        for ks in self.dbs:
            tracker = ks.tracker
            source = None if tracker is None else (tracker.volatile if self.volatile else tracker.all)
            weights.append(0 if source is None else len(source))
        if not any(weights):
            return 0
        db = random.choices(range(len(self.dbs)), weights)[0]
        ks = self.dbs[db]
        assert ks.tracker is not None
        source = ks.tracker.volatile if self.volatile else ks.tracker.all
        return self._evict(ks, source.sample(1)[0])

    def _evict(self, ks: Keyspace, key: bytes) -> int:
        value = ks.peek(key)
        if value is None:
            return 0
        size = entry_bytes(key, value)
        ks.evict(key)
        self.evicted_keys += 1
        return size
