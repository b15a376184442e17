"""A BGSAVE's walk of the stores holds names, not values: what is deleted or evicted while the
walk runs is skipped and freed at once (no second copy of the store held in RSS)."""

from __future__ import annotations

import sys

import numpy as np

from pion.server.persist import RecordType
from pion.server.persist.binding import snapshot_fields
from pion.server.store.stores import Stores


def test_a_key_deleted_during_the_walk_is_skipped_and_not_held_by_it() -> None:
    stores = Stores.make()
    keyspace = stores.dbs[0]
    for i in range(3):
        keyspace.set(b"k%d" % i, b"v%d" % i * 1000)
    value = keyspace.peek(b"k2")
    held_before = sys.getrefcount(value)
    walk = snapshot_fields(stores)
    first = next(walk)  # the walk is inside the keyspace now
    held_during = sys.getrefcount(value)
    keyspace.evict(b"k2")  # what --maxmemory does while a BGSAVE runs
    rest = list(walk)
    assert held_during == held_before  # only the store (and this test) hold the value
    assert [(int(t), f["key"]) for t, f in [first, *rest]] == [
        (int(RecordType.SET), b"k0"), (int(RecordType.SET), b"k1")]


def test_a_session_dropped_during_the_walk_is_skipped() -> None:
    stores = Stores.make()
    vstore = stores.vstore
    for sid in ("a", "b"):
        vstore.create_session(sid, 4, ("fp16",), True)
        vstore.store_rows(sid, 0, 0, np.ones((2, 4), np.float16).tobytes(), "f16")
    walk = snapshot_fields(stores)
    first = next(walk)
    vstore.drop(["b"])
    rest = list(walk)
    assert [(int(t), f["sid"]) for t, f in [first, *rest]] == [
        (int(RecordType.V_CREATE), "a"), (int(RecordType.V_STOREBATCH), "a")]
