"""What ``--maxmemory-policy`` needs to know about one database's keys, kept only while it can
evict (a ``--maxmemory`` is set and the policy is not ``noeviction``), so an unbounded server
pays nothing for it.

* ``KeyPool``: the keys in an array, for O(1) uniform random samples (a Python dict cannot be
  sampled without copying it). One pool holds every key, one the keys with a TTL (the
  ``volatile-*`` policies sample only those, as Redis samples its ``expires`` dict).
* ``KeyTracker``: the two pools plus each key's access stamp. Under the LRU policies the stamp
  is a tick of a clock shared by every database, kept in an ``OrderedDict`` in access order
  (``order``): allkeys-lru evicts exactly the least recently used key — its head — because here,
  unlike in C, that is ~10x cheaper than sampling (``benchmarks/bench_eviction.py``), and
  volatile-lru samples the TTL pool and reads the ticks. Under LFU the stamp is Redis's
  counter: logarithmic, 8 bits, minus one per idle minute (``lfu-log-factor`` 10,
  ``lfu-decay-time`` 1), 5 for a new key.

``score(key)`` is the eviction preference the policy gives a key: higher goes first.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable

LFU_INIT_VAL = 5  # Redis: a new key's counter, so it is not evicted before it can be read
LFU_LOG_FACTOR = 10  # Redis's lfu-log-factor default
LFU_DECAY_MINUTES = 1  # Redis's lfu-decay-time default

_randrange = random.randrange


class KeyPool:
    """A set of keys that can be sampled uniformly in O(1) (array + index, swap-remove)."""

    __slots__ = ("_keys", "_index")

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._index: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def add(self, key: bytes) -> None:
        if key not in self._index:
            self._index[key] = len(self._keys)
            self._keys.append(key)

    def discard(self, key: bytes) -> None:
        i = self._index.pop(key, None)
        if i is None:
            return
        last = self._keys.pop()
        if i < len(self._keys):
            self._keys[i] = last
            self._index[last] = i

    def sample(self, n: int) -> list[bytes]:
        """``n`` keys drawn uniformly (with replacement, like Redis's dictGetSomeKeys may)."""
        keys = self._keys
        if not keys:
            return []
        size = len(keys)
        return [keys[_randrange(size)] for _ in range(n)]

    def keys(self) -> list[bytes]:
        return list(self._keys)


def _minutes() -> int:
    return int(time.time() // 60) & 0xFFFF


class KeyTracker:
    """Pools and access stamps of one database's keys (see the module docstring).

    ``mode`` is ``lru``, ``lfu`` or ``plain`` (random and volatile-ttl need only the pools).
    """

    __slots__ = ("mode", "clock", "all", "volatile", "access", "order")

    def __init__(self, mode: str, clock: Callable[[], int]) -> None:
        self.mode = mode
        self.clock = clock
        self.all = KeyPool()  # unused under LRU: ``order`` holds every key
        self.volatile = KeyPool()
        self.access: dict[bytes, int] = {}  # LFU stamps
        self.order: OrderedDict[bytes, int] = OrderedDict()  # LRU: key -> tick, oldest first

    def __contains__(self, key: bytes) -> bool:
        return key in self.order if self.mode == "lru" else key in self.all

    def __len__(self) -> int:
        return len(self.order) if self.mode == "lru" else len(self.all)

    def oldest(self) -> tuple[bytes, int] | None:
        """LRU: the least recently used key and its tick (None when empty)."""
        order = self.order
        if not order:
            return None
        key = next(iter(order))  # iter(order.items()) is ~10x slower on a churned OrderedDict
        return key, order[key]

    def added(self, key: bytes, has_ttl: bool) -> None:
        if has_ttl:
            self.volatile.add(key)
        if self.mode == "lru":
            self.order[key] = self.clock()
            return
        self.all.add(key)
        if self.mode == "lfu":
            self.access[key] = (_minutes() << 8) | LFU_INIT_VAL

    def removed(self, key: bytes) -> None:
        if self.mode == "lru":
            self.order.pop(key, None)
        else:
            self.all.discard(key)
            self.access.pop(key, None)
        self.volatile.discard(key)

    def ttl_changed(self, key: bytes, has_ttl: bool) -> None:
        if has_ttl:
            self.volatile.add(key)
        else:
            self.volatile.discard(key)

    def touch(self, key: bytes) -> None:
        """A read or write of ``key``: LRU restamps it, LFU counts it (probabilistically)."""
        if self.mode == "lru":
            order = self.order
            order[key] = self.clock()
            order.move_to_end(key)
        elif self.mode == "lfu":
            now = _minutes()
            counter = self._decayed(self.access.get(key, LFU_INIT_VAL), now)
            if counter < 255:
                base = max(0, counter - LFU_INIT_VAL)
                if random.random() < 1.0 / (base * LFU_LOG_FACTOR + 1):
                    counter += 1
            self.access[key] = (now << 8) | counter

    @staticmethod
    def _decayed(stamp: int, now: int) -> int:
        counter = stamp & 0xFF
        elapsed = (now - (stamp >> 8)) & 0xFFFF
        periods = elapsed // LFU_DECAY_MINUTES
        return max(0, counter - periods)

    def lfu_counter(self, key: bytes) -> int:
        """The key's LFU count as OBJECT FREQ would show it (decayed to now)."""
        return self._decayed(self.access.get(key, LFU_INIT_VAL), _minutes())

    def score(self, key: bytes, policy: str, deadline: int | None) -> float:
        """Eviction preference under ``policy``: higher is evicted first."""
        if policy.endswith("lru"):
            return float(-self.order.get(key, 0))
        if policy.endswith("lfu"):
            return float(255 - self.lfu_counter(key))
        if policy == "volatile-ttl":
            return float(-(deadline if deadline is not None else 2**63))
        return random.random()
