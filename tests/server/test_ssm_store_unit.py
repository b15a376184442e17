"""SsmStateStore on its own: journal order, eviction planning and the V-store hooks."""

from __future__ import annotations

import pytest

from pion.common.errors import CommandError
from pion.common.ids import Namespace
from pion.server.store.records import Record, SsmDrop, SsmEvict, SsmFlush, SsmStore
from pion.server.store.ssm import SsmStateStore

KINDS = {SsmStore: "store", SsmDrop: "drop", SsmEvict: "evict", SsmFlush: "flush"}


class ListJournal:
    durable = False

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, object]]] = []

    def append(self, record: Record) -> None:
        self.records.append((KINDS[type(record)], record.fields()))


def test_every_mutation_is_journaled_before_it_applies_and_reads_are_not() -> None:
    journal = ListJournal()
    store = SsmStateStore(journal=journal)
    store.store("a", 0, b"xy")
    store.store("a", 1, b"z")
    assert store.fetch("a", range(0, 3)) == [b"xy", b"z", None]
    assert store.drop("a", 5) == 0  # nothing held: nothing logged
    assert store.drop("a", 0) == 1
    store.flush()
    assert [kind for kind, _ in journal.records] == ["store", "store", "drop", "flush"]
    assert journal.records[2][1] == {"ns": "a", "layer": 0}
    assert (len(store), store.nbytes) == (0, 0)


def test_room_comes_from_state_only_namespaces_in_lru_order_and_never_the_written_one() -> None:
    store = SsmStateStore(max_bytes=10)
    for ns in ("old", "mid", "new"):
        store.store(ns, 0, b"abc")
    store.fetch("old", range(1))  # "old" is now the most recently used
    store.store("new", 1, b"abcd")  # 13 bytes needed: evicts "mid" only
    assert [e.ns for e in store.iter_entries()] == ["old", "new"]
    assert (store.nbytes, store.evicted_prefixes) == (10, 1)


def test_a_write_that_cannot_fit_evicts_nothing() -> None:
    store = SsmStateStore(max_bytes=10)
    store.store("a", 0, b"abcdef")
    with pytest.raises(CommandError) as exc:
        store.store("b", 0, b"x" * 11)
    assert (exc.value.code, len(store), store.evicted_prefixes) == ("OOM", 1, 0)


def test_namespaces_with_kv_sessions_are_left_to_the_vstore_which_is_asked_for_the_rest() -> None:
    asked: list[tuple[int, str]] = []
    store = SsmStateStore(max_bytes=10, has_kv=lambda ns: ns == "hybrid",
                          make_kv_room=lambda extra, ns: asked.append((extra, ns)))
    store.store("hybrid", 0, b"abcd")
    store.store("pure", 0, b"abc")
    # 7 held + 8 new = 15, 5 over: "pure" (3) is planned, the V-store is asked for 8 - 3 = 5 more.
    store.store("new", 0, b"abcdefgh")
    assert asked == [(5, Namespace("new"))]
    assert [e.ns for e in store.iter_entries()] == ["hybrid", "new"]


def test_the_vstore_removing_a_prefix_side_removes_its_state_without_a_record() -> None:
    journal = ListJournal()
    store = SsmStateStore(journal=journal)
    store.store("h", 0, b"abc")
    store.remove_with_prefix("h")
    store.remove_with_prefix("h")  # the other side: already gone
    assert (len(store), store.nbytes, [k for k, _ in journal.records]) == (0, 0, ["store"])
    assert store.group_bytes("h") == 0
