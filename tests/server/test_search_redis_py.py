"""redis-py's ``r.ft()`` search API end to end, against pion-server AND real RediSearch.

Every test runs twice: once against pion-server and once against ``redis-server
--loadmodule redisearch.so`` (the oracle, from a throw-away venv; skipped with the
reason when it cannot be installed). The expected values are written here once and must
hold for both, so a difference is a bug in Pion (or a documented divergence, kept out of
this file). Each test uses its own index name and key prefix on a shared server.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.commands.search.field import NumericField, TagField, TextField, VectorField
from redis.commands.search.index_definition import IndexDefinition, IndexType
from redis.commands.search.query import NumericFilter, Query

from support.procs import start_server
from support.redisearch import SKIP_REASON, RediSearchProcess, needs_hnswlib, redisearch_paths

DOCS = {  # id -> (title, genre, year, vector)
    "1": ("The runner runs far", "sci-fi", 1999, (1.0, 0.0, 0.0, 0.0)),
    "2": ("A quiet garden", "drama", 2005, (0.9, 0.1, 0.0, 0.0)),
    "3": ("Running through the rain", "drama", 2012, (0.0, 1.0, 0.0, 0.0)),
    "4": ("Gardens of stone", "history", 2020, (0.0, 0.0, 1.0, 0.0)),
    "5": ("Stone runners", "sci-fi", 2021, (0.5, 0.5, 0.0, 0.0)),
}


def vec(values: tuple[float, ...]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


@pytest.fixture(scope="module", params=["pion", "redisearch"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if request.param == "pion":
        server: Any = start_server(tmp_path_factory.mktemp("search"))
    else:
        paths = redisearch_paths()
        if paths is None:
            pytest.skip(SKIP_REASON)
        server = RediSearchProcess(*paths)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(backend: Any, request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    with backend.client(protocol=request.param, decode_responses=True) as client:
        yield client


@pytest.fixture
def r2(backend: Any) -> Iterator[redis.Redis]:
    with backend.client(protocol=2, decode_responses=True) as client:
        yield client


_counter = iter(range(10**6))


def make_index(r: redis.Redis, algorithm: str = "FLAT", metric: str = "L2") -> tuple[str, str]:
    """A fresh index over DOCS; returns (index name, key prefix)."""
    n = next(_counter)
    name, prefix = f"idx{n}_{time.monotonic_ns()}", f"doc{n}_{time.monotonic_ns()}:"
    r.ft(name).create_index(
        [TextField("title"), TagField("genre"), NumericField("year", sortable=True),
         VectorField("embedding", algorithm, {"TYPE": "FLOAT32", "DIM": 4, "DISTANCE_METRIC": metric})],
        definition=IndexDefinition(prefix=[prefix], index_type=IndexType.HASH))
    for doc_id, (title, genre, year, vector) in DOCS.items():
        r.hset(f"{prefix}{doc_id}", mapping={"title": title, "genre": genre, "year": year,
                                              "embedding": vec(vector)})
    return name, prefix


def result_ids(res: Any, prefix: str) -> list[str]:
    """Document ids of a search reply, RESP2 ``Result`` or RESP3 dict alike, prefix removed."""
    if isinstance(res, dict):
        return [item["id"][len(prefix):] for item in res["results"]]
    return [doc.id[len(prefix):] for doc in res.docs]


def result_total(res: Any) -> int:
    return int(res["total_results"] if isinstance(res, dict) else res.total)


def result_fields(res: Any) -> list[dict[str, Any]]:
    if isinstance(res, dict):
        return [dict(item.get("extra_attributes", {})) for item in res["results"]]
    return [{k: v for k, v in doc.__dict__.items() if k not in ("id", "payload")} for doc in res.docs]


@pytest.mark.parametrize("algorithm", ["FLAT", pytest.param("HNSW", marks=needs_hnswlib)])
def test_knn_with_params_returns_the_nearest_documents_nearest_first(r: redis.Redis, algorithm: str) -> None:
    name, prefix = make_index(r, algorithm)
    q = Query("*=>[KNN 3 @embedding $vec AS dist]").sort_by("dist").return_fields("dist", "title").dialect(2)
    res = r.ft(name).search(q, {"vec": vec((1.0, 0.0, 0.0, 0.0))})
    assert result_ids(res, prefix) == ["1", "2", "5"]
    assert [round(float(f["dist"]), 4) for f in result_fields(res)] == [0.0, 0.02, 0.5]
    assert [f["title"] for f in result_fields(res)] == ["The runner runs far", "A quiet garden", "Stone runners"]


@pytest.mark.parametrize("algorithm", ["FLAT", pytest.param("HNSW", marks=needs_hnswlib)])
def test_knn_with_cosine_metric_reports_one_minus_cosine(r: redis.Redis, algorithm: str) -> None:
    name, prefix = make_index(r, algorithm, "COSINE")
    q = Query("*=>[KNN 2 @embedding $vec AS dist]").sort_by("dist").return_fields("dist").dialect(2)
    res = r.ft(name).search(q, {"vec": vec((0.0, 2.0, 0.0, 0.0))})
    assert result_ids(res, prefix) == ["3", "5"]
    assert [round(float(f["dist"]), 4) for f in result_fields(res)] == [0.0, 0.2929]


def test_tag_prefilter_limits_knn_to_matching_documents(r: redis.Redis) -> None:
    name, prefix = make_index(r)
    q = Query("(@genre:{drama | history})=>[KNN 2 @embedding $vec AS dist]").sort_by("dist").dialect(2)
    res = r.ft(name).search(q, {"vec": vec((1.0, 0.0, 0.0, 0.0))})
    assert result_ids(res, prefix) == ["2", "3"]


def test_numeric_range_with_an_exclusive_bound_filters_documents(r: redis.Redis) -> None:
    name, prefix = make_index(r)
    res = r.ft(name).search(Query("@year:[(2005 2020]").sort_by("year").no_content().dialect(2))
    assert result_ids(res, prefix) == ["3", "4"]
    res = r.ft(name).search(Query("*").add_filter(NumericFilter("year", 2020, NumericFilter.INF))
                            .sort_by("year", asc=False).no_content().dialect(2))
    assert result_ids(res, prefix) == ["5", "4"]


def test_text_search_matches_stemmed_forms_of_a_word(r: redis.Redis) -> None:
    name, prefix = make_index(r)
    res = r.ft(name).search(Query("running").no_content().dialect(2))
    assert sorted(result_ids(res, prefix)) == ["1", "3"]
    res = r.ft(name).search(Query("@title:garden").no_content().dialect(2))
    assert sorted(result_ids(res, prefix)) == ["2", "4"]


def test_text_terms_combine_with_and_or_and_not(r: redis.Redis) -> None:
    name, prefix = make_index(r)
    assert sorted(result_ids(r.ft(name).search(Query("stone garden").no_content()), prefix)) == ["4"]
    assert sorted(result_ids(r.ft(name).search(Query("stone|quiet").no_content()), prefix)) == ["2", "4", "5"]
    assert sorted(result_ids(r.ft(name).search(Query("stone -@genre:{history}").no_content()
                                               .dialect(2)), prefix)) == ["5"]


def test_text_with_tag_filter_and_knn_combine(r: redis.Redis) -> None:
    name, prefix = make_index(r)
    q = Query("(@title:stone -@genre:{drama})=>[KNN 5 @embedding $vec AS dist]").sort_by("dist").dialect(2)
    res = r.ft(name).search(q, {"vec": vec((0.0, 1.0, 0.0, 0.0))})
    assert result_ids(res, prefix) == ["5", "4"]
    q = Query("(@genre:{sci\\-fi})=>[KNN 5 @embedding $vec AS dist]").sort_by("dist").dialect(2)
    res = r.ft(name).search(q, {"vec": vec((0.0, 1.0, 0.0, 0.0))})
    assert result_ids(res, prefix) == ["5", "1"]


def test_limit_paginates_and_total_counts_every_match(r: redis.Redis) -> None:
    name, prefix = make_index(r)
    res = r.ft(name).search(Query("*").sort_by("year").paging(1, 2).no_content())
    assert result_total(res) == 5
    assert result_ids(res, prefix) == ["2", "3"]


def test_return_fields_limits_the_returned_attributes(r: redis.Redis) -> None:
    name, prefix = make_index(r)
    res = r.ft(name).search(Query("@genre:{history}").return_fields("title", "year").dialect(2))
    assert result_fields(res) == [{"title": "Gardens of stone", "year": "2020"}]


def test_deleted_and_expired_hashes_leave_the_index(r2: redis.Redis) -> None:
    name, prefix = make_index(r2)
    assert r2.delete(f"{prefix}1") == 1
    r2.pexpire(f"{prefix}2", 1)
    time.sleep(0.05)
    assert r2.exists(f"{prefix}2") == 0  # Redis expires lazily: the read makes it go now
    assert r2.hdel(f"{prefix}3", "title", "genre", "year", "embedding") == 4
    res = r2.ft(name).search(Query("*").no_content().sort_by("year"))
    assert result_ids(res, prefix) == ["4", "5"]
    assert int(r2.ft(name).info()["num_docs"]) == 2


def test_rewritten_hash_is_reindexed_with_its_new_values(r2: redis.Redis) -> None:
    name, prefix = make_index(r2)
    r2.hset(f"{prefix}4", mapping={"genre": "drama", "embedding": vec((1.0, 0.0, 0.0, 0.0))})
    res = r2.ft(name).search(Query("@genre:{drama}").no_content().sort_by("year"))
    assert result_ids(res, prefix) == ["2", "3", "4"]
    q = Query("*=>[KNN 1 @embedding $vec AS dist]").return_fields("dist").dialect(2)
    assert result_ids(r2.ft(name).search(q, {"vec": vec((1.0, 0.0, 0.0, 0.0))}), prefix) in (["1"], ["4"])


def test_hash_with_a_vector_of_the_wrong_length_is_not_indexed(r2: redis.Redis) -> None:
    name, prefix = make_index(r2)
    r2.hset(f"{prefix}bad", mapping={"title": "broken runner", "embedding": b"\x00" * 7})
    assert int(r2.ft(name).info()["hash_indexing_failures"]) == 1
    assert sorted(result_ids(r2.ft(name).search(Query("runner").no_content()), prefix)) == ["1", "5"]


def test_index_created_after_the_hashes_indexes_them(r2: redis.Redis) -> None:
    prefix = f"late{time.monotonic_ns()}:"
    for i in range(3):
        r2.hset(f"{prefix}{i}", mapping={"title": f"late document number {i}"})
    name = f"late{time.monotonic_ns()}"
    r2.ft(name).create_index([TextField("title")], definition=IndexDefinition(prefix=[prefix]))
    deadline = time.monotonic() + 5  # RediSearch scans in the background
    while int(r2.ft(name).info()["num_docs"]) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    res = r2.ft(name).search(Query("document").no_content())
    assert result_total(res) == 3


def test_info_and_list_describe_the_index(r2: redis.Redis) -> None:
    name, prefix = make_index(r2, "FLAT", "COSINE")
    info = r2.ft(name).info()
    assert info["index_name"] == name
    assert int(info["num_docs"]) == 5
    assert name in r2.execute_command("FT._LIST")


def test_dropindex_with_dd_deletes_the_documents_and_without_keeps_them(r2: redis.Redis) -> None:
    name, prefix = make_index(r2)
    assert r2.ft(name).dropindex(delete_documents=False) == "OK"
    assert r2.exists(f"{prefix}1") == 1
    name2, prefix2 = make_index(r2)
    assert r2.ft(name2).dropindex(delete_documents=True) == "OK"
    assert r2.exists(*(f"{prefix2}{i}" for i in DOCS)) == 0
    assert name2 not in r2.execute_command("FT._LIST")


def test_errors_use_redisearch_wording(r2: redis.Redis) -> None:
    name, prefix = make_index(r2)
    with pytest.raises(redis.ResponseError) as exc:
        r2.ft("no_such_index_here").search("*")
    assert str(exc.value) == "no_such_index_here: no such index"
    with pytest.raises(redis.ResponseError) as exc:
        r2.ft(name).create_index([TextField("title")])
    assert str(exc.value) == "Index already exists"
    with pytest.raises(redis.ResponseError) as exc:
        r2.ft(name).search(Query("*=>[KNN 2 @embedding $vec]").dialect(2), {"vec": b"abc"})
    assert str(exc.value) == ("Error parsing vector similarity query: query vector blob size (3) "
                              "does not match index's expected size (16).")
    with pytest.raises(redis.ResponseError) as exc:
        r2.ft(name).search(Query("*=>[KNN 2 @embedding $nothere]").dialect(2), {"vec": b"abc"})
    assert str(exc.value) == "No such parameter `nothere`"
    with pytest.raises(redis.ResponseError) as exc:
        r2.execute_command("FT.DROPINDEX", "no_such_index_here")
    assert str(exc.value) == "Unknown Index name"
    with pytest.raises(redis.ResponseError) as exc:
        r2.execute_command("FT.CREATE", f"{name}x", "SCHEMA", "a", "TEXT", "a", "TEXT")
    assert str(exc.value) == "Duplicate field in schema - a"
    with pytest.raises(redis.ResponseError) as exc:
        r2.execute_command("FT.CREATE", f"{name}x", "SCHEMA", "a", "BLOB")
    assert str(exc.value) == "Invalid field type for field `a`"
    assert name + "x" not in r2.execute_command("FT._LIST")


def test_hash_commands_answer_like_redis(r2: redis.Redis) -> None:
    key = f"h{time.monotonic_ns()}"
    assert r2.hset(key, mapping={"a": "1", "b": "2"}) == 2
    assert r2.hset(key, "a", "10") == 0
    assert r2.hget(key, "a") == "10"
    assert r2.hmget(key, "a", "zz", "b") == ["10", None, "2"]
    assert r2.hgetall(key) == {"a": "10", "b": "2"}
    assert r2.hincrby(key, "b", 5) == 7
    assert (r2.hlen(key), r2.hexists(key, "a"), r2.hexists(key, "zz")) == (2, True, False)
    assert (sorted(r2.hkeys(key)), sorted(r2.hvals(key))) == (["a", "b"], ["10", "7"])
    assert r2.type(key) == "hash"
    assert r2.hdel(key, "a", "zz") == 1
    assert r2.hdel(key, "b") == 1
    assert (r2.exists(key), r2.type(key)) == (0, "none")


def test_wrong_kind_of_value_gets_wrongtype(r2: redis.Redis) -> None:
    skey, hkey = f"s{time.monotonic_ns()}", f"h{time.monotonic_ns()}"
    r2.set(skey, "x")
    r2.hset(hkey, "f", "v")
    for call in (lambda: r2.hset(skey, "f", "v"), lambda: r2.hget(skey, "f"), lambda: r2.get(hkey)):
        with pytest.raises(redis.ResponseError) as exc:
            call()
        assert str(exc.value) == "WRONGTYPE Operation against a key holding the wrong kind of value"
    with pytest.raises(redis.ResponseError) as exc:
        r2.hincrby(hkey, "f", 1)
    assert str(exc.value) == "hash value is not an integer"
    assert r2.get(skey) == "x"
    assert r2.hgetall(hkey) == {"f": "v"}
    assert r2.set(hkey, "now a string") is True
    assert r2.type(hkey) == "string"


def test_module_list_names_the_search_module(r2: redis.Redis) -> None:
    modules = {m["name"]: int(m["ver"]) for m in r2.module_list()}
    assert modules["search"] >= 20600  # what RedisVL requires


def test_pion_counts_searches_as_vector_queries(backend: Any, r2: redis.Redis) -> None:
    if not hasattr(backend, "data_dir"):
        pytest.skip("PION.STATS is Pion's own command")
    name, prefix = make_index(r2)
    before = dict(zip(*[iter(r2.execute_command("PION.STATS"))] * 2, strict=True))["vector_queries"]
    r2.ft(name).search(Query("*").no_content())
    r2.ft(name).search(Query("*=>[KNN 1 @embedding $v]").dialect(2), {"v": vec((1.0, 0, 0, 0))})
    with pytest.raises(redis.ResponseError):
        r2.ft(name).search(Query("foo("))
    after = dict(zip(*[iter(r2.execute_command("PION.STATS"))] * 2, strict=True))["vector_queries"]
    assert int(after) - int(before) == 2


def test_flushall_drops_every_index(r2: redis.Redis) -> None:
    name, prefix = make_index(r2)
    assert r2.flushall() is True
    assert r2.execute_command("FT._LIST") == []
    r2.hset(f"{prefix}1", "title", "back again")
    with pytest.raises(redis.ResponseError) as exc:
        r2.ft(name).search("*")
    assert str(exc.value) == f"{name}: no such index"
