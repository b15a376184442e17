"""The FT.* engine's parts in-process: query parser, BM25 ranking, vector indexes, hashes."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pion.common.errors import CommandError
from pion.server.search.query import (
    AndNode,
    KnnClause,
    NotNode,
    NumericNode,
    OrNode,
    TagNode,
    TermNode,
    parse_query,
)
from pion.server.search.schema import VectorParams, parse_create
from pion.server.search.store import SearchStore
from pion.server.search.vectors import FlatVectorIndex, HnswVectorIndex
from pion.server.store.keyspace import Keyspace
from pion.server.store.records import Record
from support.redisearch import needs_hnswlib


def words(text: str) -> list[bytes]:
    return [w.encode() for w in text.split()]


def test_query_parser_builds_the_tree_with_and_binding_tighter_than_or() -> None:
    q = parse_query("(@g:{a|b} -@n:[(1 +inf]) hello|wor*=>[KNN 5 @v $b EF_RUNTIME 50 AS s]", {"b": b"xy"})
    assert q.filter == OrNode((
        AndNode((AndNode((TagNode("g", ("a", "b")), NotNode(NumericNode("n", 1.0, float("inf"), True, False)))),
                 TermNode(None, "hello"))),
        TermNode(None, "wor", prefix=True)))
    assert q.knn == KnnClause(5, "v", b"xy", 50, "s")


def test_query_parser_substitutes_params_in_tags_ranges_and_k() -> None:
    q = parse_query("@g:{$t} @n:[$lo $hi]=>[KNN $k @v $b]", {"t": b"x y", "lo": b"2", "hi": b"5", "k": b"3", "b": b"z"})
    assert q.filter == AndNode((TagNode("g", ("x y",)), NumericNode("n", 2.0, 5.0)))
    assert q.knn == KnnClause(3, "v", b"z")


@pytest.mark.parametrize(("text", "message"), [
    ("foo bar(", "Syntax error at offset 8 near "),
    ("@n:[a b]", "Syntax error at offset 5 near b]"),
    ("@g:{a|}", "Syntax error at offset 7 near "),
    ("a | | b", "Syntax error at offset 4 near |"),
    ("*=>[KNN x @v $b]", "Invalid value `x`: expected a non-negative integer"),
    ("*=>[KNN 2 @v $zz]", "No such parameter `zz`"),
    ("*=>[KNN 2 @v $b BOGUS]", "Unknown attribute `BOGUS` in KNN query"),
    ("   ", "Syntax error at offset 0 near "),
])
def test_malformed_queries_are_refused_with_redisearch_style_errors(text: str, message: str) -> None:
    with pytest.raises(CommandError) as exc:
        parse_query(text, {"b": b"x"})
    assert exc.value.message == message


@pytest.mark.parametrize(("args", "message"), [
    ("SCHEMA", "Fields arguments are missing"),
    ("PREFIX 1 a:", "No schema found"),
    ("ON JSON SCHEMA a TEXT", "Invalid key type `JSON`: this build indexes HASH only"),
    ("SCHEMA v VECTOR HNSW 6 TYPE FLOAT32 DIM 0 DISTANCE_METRIC L2",
     "Bad arguments for vector similarity HNSW index dim: Value is outside acceptable bounds"),
    ("SCHEMA v VECTOR FLAT 6 TYPE FLOAT64 DIM 4 DISTANCE_METRIC L2",
     "Bad arguments for vector similarity FLAT index type: Unknown argument (this build stores FLOAT32 vectors)"),
    ("SCHEMA v VECTOR FLAT 4 TYPE FLOAT32 DIM 4",
     "Missing mandatory parameter: cannot create FLAT index without specifying DISTANCE_METRIC argument"),
    ("SCHEMA v VECTOR FLAT 5 TYPE FLOAT32 DIM 4 DISTANCE_METRIC",
     "Bad number of arguments for vector similarity index: got 5 but expected even number "
     "(as algorithm parameters should be submitted as named arguments)"),
    ("BOGUS SCHEMA a TEXT", "Unknown argument `BOGUS`"),
])
def test_bad_index_definitions_are_refused(args: str, message: str) -> None:
    with pytest.raises(CommandError) as exc:
        parse_create("i", words(args))
    assert exc.value.message == message


def _store() -> tuple[Keyspace, SearchStore]:
    ks = Keyspace()
    return ks, SearchStore(ks)


def test_bm25_ranks_the_document_with_more_occurrences_and_weight_first() -> None:
    ks, store = _store()
    index = store.create("i", words("PREFIX 1 d: SCHEMA title TEXT WEIGHT 5 body TEXT"))
    ks.hset(b"d:1", [b"title", b"other", b"body", b"apple banana cherry"])
    ks.hset(b"d:2", [b"title", b"other", b"body", b"apple apple apple banana"])
    ks.hset(b"d:3", [b"title", b"apple", b"body", b"banana"])
    hits = index.search(parse_query("apple"))
    assert [h.key for h in hits] == [b"d:3", b"d:2", b"d:1"]
    assert [h.key for h in index.search(parse_query('"banana cherry"'))] == [b"d:1"]


def test_index_follows_hset_hdel_set_and_flush_drops_it() -> None:
    ks, store = _store()
    index = store.create("i", words("PREFIX 1 d: SCHEMA t TAG"))
    ks.hset(b"d:1", [b"t", b"x"])
    ks.hset(b"other:1", [b"t", b"x"])
    ks.hset(b"d:2", [b"t", b"x,y"])
    assert len(index) == 2
    ks.hdel(b"d:2", [b"t"])
    assert [h.key for h in index.search(parse_query("@t:{y}"))] == []
    ks.set(b"d:1", b"a string now")
    ks.hset(b"d:3", [b"t", b"z"])
    assert [h.key for h in index.search(parse_query("*"))] == [b"d:3"]  # d:2 lost its last field
    ks.flush()
    assert (store.indexes, ks.used_bytes) == ({}, 0)


def test_hash_memory_accounting_returns_to_zero() -> None:
    ks = Keyspace()
    ks.hset(b"h", [b"a", b"1", b"b", b"22"])
    ks.hset(b"h", [b"a", b"333"])
    assert ks.hdel(b"h", [b"a", b"zz"]) == 1
    assert ks.hdel(b"h", [b"b"]) == 1
    assert (len(ks), ks.used_bytes) == (0, 0)


@needs_hnswlib
def test_hnsw_recall_at_10_matches_exact_search() -> None:
    rng = np.random.default_rng(0)
    data = rng.standard_normal((3000, 32)).astype(np.float32)
    params = VectorParams("HNSW", 32, "COSINE", ef_runtime=100)
    flat, hnsw = FlatVectorIndex(params), HnswVectorIndex(params)
    for i, row in enumerate(data):
        flat.add(i, row)
        hnsw.add(i, row)
    queries = rng.standard_normal((50, 32)).astype(np.float32)
    recall = np.mean([len({d for d, _ in hnsw.knn(q, 10, None)} & {d for d, _ in flat.knn(q, 10, None)}) / 10
                      for q in queries])
    assert recall >= 0.95


@pytest.mark.parametrize("kind", ["FLAT", pytest.param("HNSW", marks=needs_hnswlib)])
def test_vector_indexes_reuse_removed_slots_and_honour_the_prefilter(kind: str) -> None:
    params = VectorParams(kind, 2, "L2")
    for index in ((FlatVectorIndex if kind == "FLAT" else HnswVectorIndex)(params),):
        for i in range(100):
            index.add(i, np.array([i, 0], dtype=np.float32))
        for i in range(0, 100, 2):
            index.remove(i)
        for i in range(100, 150):
            index.add(i, np.array([i, 0], dtype=np.float32))
        assert len(index) == 100
        assert [d for d, _ in index.knn(np.array([0, 0], dtype=np.float32), 3, None)] == [1, 3, 5]
        assert index.knn(np.array([0, 0], dtype=np.float32), 2, {7, 120, 8}) == [(7, 49.0), (120, 14400.0)]


@needs_hnswlib
def test_deferred_recovery_builds_indexes_once_and_skipinitialscan_follows_the_replay() -> None:
    ks, store = _store()
    store.defer_indexing()
    ks.hset(b"d:old", [b"t", b"x", b"v", np.array([1, 0], dtype="<f4").tobytes()])
    store.restore_create("full", words("PREFIX 1 d: SCHEMA t TAG v VECTOR HNSW 6 TYPE FLOAT32 DIM 2 DISTANCE_METRIC L2"))
    store.restore_create("skip", words("SKIPINITIALSCAN PREFIX 1 d: SCHEMA t TAG"))
    ks.hset(b"d:new", [b"t", b"x", b"v", np.array([0, 1], dtype="<f4").tobytes()])
    ks.hset(b"d:bad", [b"t", b"x", b"v", b"short"])
    assert (len(store.indexes["full"]), len(store.indexes["skip"])) == (0, 2)
    store.finish_deferred()
    full = store.indexes["full"]
    assert (len(full), full.failures, len(store.indexes["skip"])) == (2, 1, 2)
    knn = parse_query("*=>[KNN 2 @v $q]", {"q": np.array([0, 1], dtype="<f4").tobytes()})
    assert [h.key for h in full.search(knn)] == [b"d:new", b"d:old"]
    ks.hdel(b"d:new", [b"v"])
    assert [h.key for h in full.search(knn)] == [b"d:old"]


@needs_hnswlib
def test_hnsw_graph_dump_and_load_keeps_answers_and_never_reuses_a_label() -> None:
    params = VectorParams("HNSW", 2, "L2")
    index = HnswVectorIndex(params)
    for i in range(1, 51):
        index.add(i, np.array([i, 0], dtype=np.float32))
    index.remove(50)
    blob = index.dump()
    restored = HnswVectorIndex(params)
    next_label = restored.load(blob, list(range(1, 50)))
    query = np.array([49.4, 0], dtype=np.float32)
    assert restored.knn(query, 2, None) == index.knn(query, 2, None)
    assert [(d, round(x, 4)) for d, x in restored.knn(query, 2, None)] == [(49, 0.16), (48, 1.96)]
    assert next_label == 51  # 50 was deleted but its label still lives in the graph
    restored.add(next_label, np.array([49.5, 0], dtype=np.float32))
    assert [d for d, _ in restored.knn(query, 2, None)] == [51, 49]
    assert len(restored) == 50


def test_hnsw_without_hnswlib_is_refused_before_anything_is_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hnswlib", None)  # what a core install (no [embed] extra) has
    ks, store = _store()
    logged: list[str] = []

    class Recording:
        durable = True

        def append(self, record: Record) -> None:
            logged.append(type(record).__name__)
    store.journal = Recording()
    with pytest.raises(CommandError) as exc:
        store.create("h", words("SCHEMA v VECTOR HNSW 6 TYPE FLOAT32 DIM 2 DISTANCE_METRIC L2"))
    assert exc.value.message == "HNSW vector indexes need hnswlib: pip install 'pion[embed]' (or use FLAT)"
    assert (store.indexes, logged) == ({}, [])
    store.create("f", words("SCHEMA v VECTOR FLAT 6 TYPE FLOAT32 DIM 2 DISTANCE_METRIC L2"))
    assert (list(store.indexes), logged) == (["f"], ["FtCreate"])
