"""The V-store object on its own: rows, formats, LRU pairs, byte budget, journal order."""

from __future__ import annotations


import numpy as np
import pytest

from pion.common.errors import CommandError
from pion.server.receipt import FIELDS, Receipt
from pion.server.store.prefixes import BlockTable
from pion.server.store.records import Record
from pion.server.store.vstore import VStore, pair_of

D = 8


def rows(n: int, start: float = 0.0, dim: int = D) -> np.ndarray:
    return (np.arange(n * dim, dtype=np.float32).reshape(n, dim) + start) / 8


class ListJournal:
    durable = False

    def __init__(self, store: VStore | None = None) -> None:
        self.records: list[tuple[str, dict[str, object]]] = []
        self.store = store

    def append(self, record: Record) -> None:
        # Record what the store held at call time, to prove the hook runs before the mutation.
        held = None if self.store is None else len(self.store)
        self.records.append((type(record).__name__, {**record.fields(), "_sessions_before": held}))


def test_rows_stored_in_fp32_come_back_bit_exact_without_a_copy() -> None:
    store = VStore()
    store.create_session("s", D, ("fp32",), uniform=True)
    data = rows(5)
    assert store.store_rows("s", 0, 0, data.tobytes(), "f32") == 5
    view = store.fetch("s", 0, 1, 4, "f32")
    assert bytes(view) == data[1:4].tobytes()
    assert view.obj is not None and view.nbytes == 3 * D * 4


def test_fp16_session_serves_f16_raw_and_f32() -> None:
    store = VStore()
    store.create_session("s", D, ("fp16",), uniform=True)
    data = rows(3)
    store.store_rows("s", 2, 0, data.tobytes(), "f32")
    assert bytes(store.fetch("s", 2, 0, 3, "f16")) == data.astype("<f2").tobytes()
    assert bytes(store.fetch("s", 2, 0, 3, "raw")) == data.astype("<f2").tobytes()
    assert np.frombuffer(store.fetch("s", 2, 0, 3, "f32"), "<f4").tolist() == data.reshape(-1).tolist()


def test_overwrite_is_allowed_and_a_gap_is_refused_with_nothing_stored() -> None:
    store = VStore()
    store.create_session("s", D, ("fp32",), uniform=True)
    store.store_rows("s", 0, 0, rows(4).tobytes())
    assert store.store_rows("s", 0, 2, rows(3, 100).tobytes()) == 5
    with pytest.raises(CommandError, match="gap"):
        store.store_rows("s", 0, 6, rows(1).tobytes())
    assert store.get("s").rows_in(0) == 5  # type: ignore[union-attr]
    assert np.frombuffer(store.fetch("s", 0, 2, 5), "<f4").tolist() == rows(3, 100).reshape(-1).tolist()
    assert store.nbytes == 5 * D * 4


def test_partial_row_blob_is_refused() -> None:
    store = VStore()
    store.create_session("s", D, ("fp16",), uniform=True)
    with pytest.raises(CommandError, match="whole number"):
        store.store_rows("s", 0, 0, b"\x00" * (D * 4 + 2), "f32")
    assert store.nbytes == 0


def test_buffers_grow_by_doubling_not_per_token() -> None:
    store = VStore()
    store.create_session("s", D, ("fp32",), uniform=True)
    capacities = []
    for i in range(40):
        store.store_rows("s", 0, i, rows(1, i).tobytes())
        capacities.append(store.get("s").layers[0].capacity_rows)  # type: ignore[union-attr]
    assert sorted(set(capacities)) == [1, 16, 32, 64]


def test_schema_session_uses_each_layers_format_and_rejects_layers_beyond_it() -> None:
    store = VStore()
    store.create_session("s", D, ("fp16", "fp32"), uniform=False)
    store.store_rows("s", 0, 0, rows(2).tobytes())
    store.store_rows("s", 1, 0, rows(2).tobytes())
    assert store.get("s").layers[0].row_bytes == 2 * D  # type: ignore[union-attr]
    assert store.get("s").layers[1].row_bytes == 4 * D  # type: ignore[union-attr]
    with pytest.raises(CommandError, match="out of range"):
        store.store_rows("s", 2, 0, rows(1).tobytes())


def test_recreating_with_other_params_is_refused() -> None:
    store = VStore()
    assert store.create_session("s", D, ("fp16",), uniform=True) is True
    assert store.create_session("s", D, ("fp16",), uniform=True) is False
    with pytest.raises(CommandError, match="exists"):
        store.create_session("s", D, ("fp32",), uniform=True)


def test_unknown_format_is_refused() -> None:
    store = VStore()
    with pytest.raises(CommandError, match="unknown format"):
        store.create_session("s", D, ("fp99",), uniform=True)
    assert len(store) == 0


def test_lru_evicts_both_sides_of_a_prefix_together() -> None:
    store = VStore(max_sessions=4)
    store.register_prefix("a", D, ("fp16",), ("fp16",), True)
    store.register_prefix("b", D, ("fp16",), ("fp16",), True)
    store.lookup_prefix("a")  # a hit touches both sides: a is now more recent than b
    store.register_prefix("c", D, ("fp16",), ("fp16",), True)
    assert store.sids() == ["a_pk", "a_pv", "c_pk", "c_pv"]
    assert store.prefix("b") is None
    assert store.evicted_sessions == 2


def test_lru_evicts_the_pair_even_when_only_one_side_is_old() -> None:
    store = VStore(max_sessions=3)
    store.register_prefix("a", D, ("fp16",), ("fp16",), True)
    store.create_session("x", D, ("fp16",), uniform=True)
    store.fetch("a_pv", 0, 0, 0)  # a_pk is the oldest, a_pv the newest
    store.create_session("y", D, ("fp16",), uniform=True)
    assert store.sids() == ["x", "y"]


def test_byte_budget_evicts_lru_and_refuses_what_cannot_fit() -> None:
    row = 2 * D
    store = VStore(max_bytes=10 * row)
    for name in ("a", "b"):
        store.register_prefix(name, D, ("fp16",), ("fp16",), True)
        store.store_rows(f"{name}_pk", 0, 0, rows(2).tobytes())
        store.store_rows(f"{name}_pv", 0, 0, rows(2).tobytes())
    assert store.nbytes == 8 * row
    store.store_rows("b_pk", 0, 2, rows(4).tobytes())  # needs 4 more rows -> a goes
    assert store.sids() == ["b_pk", "b_pv"]
    with pytest.raises(CommandError) as info:
        store.store_rows("b_pv", 0, 2, rows(20).tobytes())
    assert info.value.code == "OOM"
    assert store.sids() == ["b_pk", "b_pv"]
    assert store.nbytes == 8 * row


def test_external_bytes_count_against_the_budget() -> None:
    external = [0]
    store = VStore(max_bytes=100 * D, external_bytes=lambda: external[0])
    store.create_session("s", D, ("fp32",), uniform=True)
    external[0] = 100 * D - 4 * D
    store.store_rows("s", 0, 0, rows(1).tobytes())
    with pytest.raises(CommandError):
        store.store_rows("s", 0, 1, rows(1).tobytes())


def test_max_sessions_too_small_for_a_pair_is_refused_without_evicting() -> None:
    store = VStore(max_sessions=1)
    store.create_session("x", D, ("fp16",), uniform=True)
    with pytest.raises(CommandError, match="max-sessions"):
        store.register_prefix("a", D, ("fp16",), ("fp16",), True)
    assert store.sids() == ["x"]


def test_journal_sees_every_mutation_before_it_is_applied() -> None:
    store = VStore(max_sessions=2)
    journal = ListJournal(store)
    store.journal = journal
    store.register_prefix("a", D, ("fp16",), ("fp16",), True, layers=1)
    store.store_rows("a_pk", 0, 0, rows(1).tobytes())
    store.create_session("x", D, ("fp16",), uniform=True)  # evicts a
    store.drop(["x", "nope"])
    with pytest.raises(CommandError):
        store.store_rows("x", 0, 0, rows(1).tobytes())
    kinds = [(kind, fields["_sessions_before"]) for kind, fields in journal.records]
    assert kinds == [("PrefixRegister", 0), ("VStoreBatch", 2), ("Evict", 2), ("VCreate", 0), ("VDrop", 1)]
    assert journal.records[1][1]["rows"] == rows(1).astype("<f2").tobytes()


def test_lookup_with_layers_hits_only_when_both_sides_are_complete() -> None:
    store = VStore()
    store.register_prefix("a", D, ("fp16",), ("fp16",), True, layers=2)
    for layer in (0, 1):
        store.store_rows("a_pk", layer, 0, rows(3).tobytes())
    store.store_rows("a_pv", 0, 0, rows(3).tobytes())
    assert store.lookup_prefix("a") == (False, 0)
    store.store_rows("a_pv", 1, 0, rows(2).tobytes())
    assert store.lookup_prefix("a") == (False, 0)
    store.store_rows("a_pv", 1, 2, rows(1).tobytes())
    assert store.lookup_prefix("a") == (True, 3)


def test_membership_bitmap_matches_a_python_set() -> None:
    rng = np.random.default_rng(1)
    table_hashes = rng.integers(0, 2**64 - 1, size=50, dtype=np.uint64)
    probes = np.concatenate([table_hashes[::3], rng.integers(0, 2**64 - 1, size=13, dtype=np.uint64)])
    table = BlockTable.from_blob(16, table_hashes.astype("<u8").tobytes())
    bitmap = table.membership(probes.astype("<u8").tobytes())
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")[: len(probes)]
    wanted = set(table_hashes.tolist())
    assert bits.tolist() == [int(p in wanted) for p in probes.tolist()]
    assert len(bitmap) == (len(probes) + 7) // 8


def test_pair_of_names_both_sides_of_a_prefix_and_leaves_a_plain_sid_alone() -> None:
    assert pair_of("ns_pv") == ("ns_pk", "ns_pv")
    assert pair_of("plain") == ("plain",)


def test_receipt_separates_measured_and_estimated_time() -> None:
    receipt = Receipt(prefill_us_per_token=500.0)
    receipt.record_prefix_lookup(True, 1000)
    receipt.record_prefix_lookup(True, 10, measured_ms=250.0)
    receipt.record_prefix_lookup(False)
    snap = receipt.snapshot()
    assert list(snap) == list(FIELDS)
    assert len(snap) == 16
    assert snap["prefill_seconds_avoided_estimated"] == 0.5
    assert snap["prefill_seconds_avoided_measured"] == 0.25
    assert snap["prefill_seconds_avoided"] == 0.75
    assert snap["kvprefix_hits_measured"] == 1
    assert snap["kvprefix_tokens_served"] == 1010
    assert snap["kvprefix_hit_rate"] == 2 / 3
    receipt.reset()
    assert receipt.snapshot()["kvprefix_hits"] == 0
