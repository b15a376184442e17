"""The eviction machinery in-process: KeyPool's O(1) sampling set, and the Evictor choosing by
policy across databases (with samples as large as the keyspace it is exact)."""

from __future__ import annotations

import random

from pion.server.store.eviction import Evictor
from pion.server.store.key_tracking import KeyPool
from pion.server.store.keyspace import Keyspace, now_ms


def test_a_key_pool_holds_each_key_once_and_samples_only_present_keys() -> None:
    pool = KeyPool()
    for i in range(100):
        pool.add(b"%d" % i)
    pool.add(b"5")
    for i in range(0, 100, 2):
        pool.discard(b"%d" % i)
    pool.discard(b"nope")
    assert len(pool) == 50
    assert sorted(pool.keys()) == sorted(b"%d" % i for i in range(1, 100, 2))
    random.seed(7)
    assert set(pool.sample(500)) == set(pool.keys())  # uniform enough to reach every key
    assert KeyPool().sample(3) == []


def _dbs(n: int) -> tuple[Keyspace, ...]:
    return tuple(Keyspace(db=i) for i in range(n))


def test_exact_lru_evicts_the_least_recently_touched_key_of_any_database() -> None:
    dbs = _dbs(2)
    evictor = Evictor(dbs, "allkeys-lru", samples=64)
    evictor.configure("allkeys-lru", 64, budget=1)
    for i in range(10):
        dbs[i % 2].set(b"k%d" % i, b"v")
    dbs[0].get(b"k0")
    dbs[1].get(b"k1")
    order = []
    while evictor.evict_one():
        order.append(next(k for k in (b"k%d" % i for i in range(10))
                          if k not in order and dbs[int(k[1:]) % 2].peek(k) is None))
    assert order == [b"k2", b"k3", b"k4", b"k5", b"k6", b"k7", b"k8", b"k9", b"k0", b"k1"]
    assert evictor.evicted_keys == 10


def test_volatile_ttl_takes_the_nearest_deadline_and_never_a_key_without_ttl() -> None:
    dbs = _dbs(1)
    evictor = Evictor(dbs)
    evictor.configure("volatile-ttl", 64, budget=1)
    ks = dbs[0]
    ks.set(b"forever", b"v")
    base = now_ms() + 100_000
    for i in (5, 1, 3):
        ks.set(b"t%d" % i, b"v", expire_at_ms=base + i)
    freed = evictor.evict(1)
    assert freed == len(b"t1") + 1 + 96
    assert ks.peek(b"t1") is None and ks.peek(b"t3") is not None
    assert evictor.evict(10_000) == 2 * (len(b"t3") + 1 + 96)
    assert ks.peek(b"forever") == b"v"
    assert evictor.evict_one() == 0


def test_tracking_runs_only_while_a_budget_and_an_evicting_policy_are_set() -> None:
    dbs = _dbs(2)
    evictor = Evictor(dbs)
    evictor.configure("allkeys-lru", 5, budget=0)
    assert [ks.tracker for ks in dbs] == [None, None]
    dbs[1].set(b"a", b"v")
    evictor.configure("allkeys-lru", 5, budget=1000)
    assert dbs[1].tracker is not None and b"a" in dbs[1].tracker
    evictor.configure("noeviction", 5, budget=1000)
    assert [ks.tracker for ks in dbs] == [None, None]
    assert evictor.evict_one() == 0


def test_swapping_databases_carries_their_tracking_along() -> None:
    dbs = _dbs(2)
    evictor = Evictor(dbs)
    evictor.configure("allkeys-lru", 5, budget=1000)
    dbs[0].set(b"zero", b"v")
    dbs[1].set(b"one", b"v")
    dbs[0].swap_with(dbs[1])
    assert dbs[0].peek(b"one") == b"v" and dbs[1].peek(b"zero") == b"v"
    assert dbs[0].tracker is not None and list(dbs[0].tracker.order) == [b"one"]
    assert dbs[0].used_bytes == len(b"one") + 1 + 96


def test_byte_accounting_is_the_same_with_and_without_tracking() -> None:
    for budget in (0, 10_000):
        ks = _dbs(1)[0]
        Evictor((ks,)).configure("allkeys-lru", 5, budget)
        ks.set(b"k", b"small")
        ks.set(b"k", b"a much longer value")
        ks.hset(b"h", [b"f", b"v"])
        ks.set(b"h", b"now a string")
        assert ks.used_bytes == (1 + 19 + 96) + (1 + 12 + 96)
