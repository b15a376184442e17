"""The semantic cache core without a server: scope index (exact and ANN) and the store."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from pion.server.semantic.cache import SemanticCacheStore
from pion.server.semantic.index import ScopeIndex
from pion.server.store.records import Record


def _unit(rng: np.random.Generator, n: int, dim: int = 32) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _graph(kind: str) -> pytest.MarkDecorator:
    # hnswlib comes with the [embed] extra, usearch with [dev]; a core install has neither.
    return pytest.mark.skipif(importlib.util.find_spec(kind) is None, reason=f"{kind} is not installed")


@pytest.mark.parametrize("kind", ["exact", pytest.param("hnswlib", marks=_graph("hnswlib")),
                                  pytest.param("usearch", marks=_graph("usearch"))])
def test_search_finds_the_stored_vector_with_its_true_cosine(kind: str) -> None:
    rng = np.random.default_rng(0)
    vecs = _unit(rng, 300)
    index = ScopeIndex(32, "hnswlib" if kind == "exact" else kind, ann_min_entries=10**9 if kind == "exact" else 50)
    for i, v in enumerate(vecs):
        index.add(i + 1, v)
    assert index.uses_ann is (kind != "exact")
    for i in (0, 77, 299):
        entry_id, sim = index.search(vecs[i])
        assert entry_id == i + 1
        assert sim == pytest.approx(1.0, abs=1e-5)


def test_without_the_graph_library_a_large_scope_stays_exact_and_correct(monkeypatch: pytest.MonkeyPatch,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "hnswlib", None)  # what a core install (no [embed] extra) has
    vecs = _unit(np.random.default_rng(2), 60)
    index = ScopeIndex(32, "hnswlib", ann_min_entries=50)
    with caplog.at_level("WARNING"):
        for i, v in enumerate(vecs):
            index.add(i + 1, v)
    assert index.uses_ann is False
    assert [r.getMessage() for r in caplog.records] == [
        "semantic index: hnswlib is not installed (the [embed] extra); scopes above 50 entries keep using exact search"]
    assert [index.search(vecs[i])[0] for i in (0, 59)] == [1, 60]


@pytest.mark.parametrize("ann_min", [10**9, 20])
def test_removed_entries_are_never_returned_and_holes_are_compacted(ann_min: int) -> None:
    rng = np.random.default_rng(1)
    vecs = _unit(rng, 200)
    index = ScopeIndex(32, "hnswlib", ann_min_entries=ann_min)
    for i, v in enumerate(vecs):
        index.add(i, v)
    for i in range(150):
        assert index.remove(i) is True
    assert index.remove(3) is False
    assert len(index) == 50
    for i in (0, 10, 149):
        assert index.search(vecs[i])[0] >= 150
    assert index.search(vecs[160])[0] == 160


def test_store_lookup_respects_scope_threshold_and_counts() -> None:
    rng = np.random.default_rng(2)
    v = _unit(rng, 2)
    store = SemanticCacheStore()
    eid = store.put("c", "s1", "q", b"answer", v[0], meta=b'{"q": "q"}')
    hit = store.lookup("c", "s1", v[0], 0.9)
    assert hit is not None
    assert (hit[0].entry_id, hit[0].response, hit[0].meta) == (eid, b"answer", b'{"q": "q"}')
    assert store.lookup("c", "s2", v[0], 0.9) is None
    assert store.lookup("c", "s1", v[1], 0.9) is None
    info = store.info("c")
    assert (info["entries"], info["scopes"], info["hits"], info["misses"]) == (1, 1, 1, 2)


def test_expired_entries_are_purged_on_lookup_without_logging_the_purge() -> None:
    now = [1000.0]
    store = SemanticCacheStore(clock=lambda: now[0])
    v = _unit(np.random.default_rng(3), 1)[0]
    events: list[str] = []

    class Names:
        durable = False

        def append(self, record: Record) -> None:
            events.append(type(record).__name__)

    store.journal = Names()
    store.put("c", "s", "q", b"a", v, ttl_s=10)
    now[0] += 9
    assert store.lookup("c", "s", v, 0.5) is not None
    now[0] += 2
    assert store.lookup("c", "s", v, 0.5) is None
    assert len(store) == 0
    assert events == ["SemanticSet"]  # deadlines are absolute: replay expires the entry itself


def test_delete_and_flush_report_what_they_removed() -> None:
    rng = np.random.default_rng(4)
    store = SemanticCacheStore()
    ids = [store.put("c", "s", f"q{i}", b"a", v) for i, v in enumerate(_unit(rng, 3))]
    assert store.delete("c", [ids[0], 999]) == 1
    assert store.delete("nope", [1]) == 0
    assert store.flush("c") == 2
    assert store.flush("c") == 0
    assert len(store) == 0


@pytest.mark.slow  # loads MiniLM
def test_concurrent_embeds_share_model_calls_and_match_single_encodes() -> None:
    import asyncio

    from pion.server.semantic.embedder import MiniLMEmbedder

    embedder = MiniLMEmbedder(threads=1)
    texts = [f"question number {i}" for i in range(6)]

    async def run() -> list[np.ndarray]:
        return await asyncio.gather(*(embedder.embed([t]) for t in texts))

    try:
        results = asyncio.run(run())
        assert embedder.calls <= 2  # the first text starts a batch, the other five wait and go together
        assert [r.shape for r in results] == [(1, 384)] * 6
        single = embedder.encode(texts)
        assert np.allclose(np.vstack(results), single, atol=1e-5)
    finally:
        embedder.close()
