"""FT.HYBRID through redis-py's ``ft().hybrid_search`` (RediSearch 2.10, the oracle we can
install, predates FT.HYBRID, so these run against pion-server only)."""

from __future__ import annotations

import struct
import warnings
from collections.abc import Iterator

import pytest
import redis

from support.procs import ServerProcess

with warnings.catch_warnings():  # redis-py marks the hybrid API experimental
    warnings.simplefilter("ignore")
    from redis.commands.search.hybrid_query import (
        CombinationMethods,
        CombineResultsMethod,
        HybridPostProcessingConfig,
        HybridQuery,
        HybridSearchQuery,
        HybridVsimQuery,
    )

DOCS = {  # id -> (text, vector)
    "a": ("red apples and green pears", (1.0, 0.0)),
    "b": ("green apples", (0.0, 1.0)),
    "c": ("blue sky", (0.9, 0.1)),
    "d": ("apples apples apples", (-1.0, 0.0)),
}


@pytest.fixture
def r(shared_pion_server: ServerProcess) -> Iterator[redis.Redis]:
    with shared_pion_server.client(protocol=2, decode_responses=True) as client:
        client.execute_command("FLUSHALL")
        if "h" in client.execute_command("FT._LIST"):
            client.execute_command("FT.DROPINDEX", "h")
        client.execute_command("FT.CREATE", "h", "PREFIX", "1", "h:", "SCHEMA", "text", "TEXT",
                               "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "2", "DISTANCE_METRIC", "L2")
        for key, (text, vec) in DOCS.items():
            client.hset(f"h:{key}", mapping={"text": text, "v": struct.pack("<2f", *vec)})
        yield client


def _run(r: redis.Redis, *args: object) -> dict[str, object]:
    reply = r.execute_command("FT.HYBRID", "h", *args)
    return dict(zip(reply[0::2], reply[1::2], strict=True))


def test_rrf_fuses_the_text_and_vector_rankings(r: redis.Redis) -> None:
    reply = _run(r, "SEARCH", "apples", "VSIM", "@v", "$q", "KNN", "2", "K", "2",
                 "PARAMS", "2", "q", struct.pack("<2f", 1.0, 0.0))
    results = [dict(zip(item[0::2], item[1::2], strict=True)) for item in reply["results"]]  # type: ignore[attr-defined]
    # text ranks d, b, a (BM25); vector ranks a, c. a: 1/63 + 1/61, d: 1/61, c: 1/62, b: 1/62
    assert [row["__key"] for row in results] == ["h:a", "h:d", "h:b", "h:c"]
    assert float(results[0]["__score"]) == pytest.approx(1 / 63 + 1 / 61)
    assert reply["total_results"] == 4


def test_redis_py_hybrid_search_parses_the_reply(r: redis.Redis) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        query = HybridQuery(HybridSearchQuery("sky"), HybridVsimQuery("@v", "$q"))
        post = HybridPostProcessingConfig().load("@text").limit(0, 2)
        res = r.ft("h").hybrid_search(query, combine_method=CombineResultsMethod(CombinationMethods.RRF, CONSTANT=60),
                                      post_processing=post, params_substitution={"q": struct.pack("<2f", 0.9, 0.1)})
    assert res.total_results == 4
    assert [(row["__key"], row["text"]) for row in res.results] == [(b"h:c", b"blue sky"), (b"h:a", b"red apples and green pears")]


def test_hybrid_filter_limits_the_vector_side(r: redis.Redis) -> None:
    reply = _run(r, "SEARCH", "sky", "VSIM", "@v", "$q", "FILTER", "@text:green",
                 "PARAMS", "2", "q", struct.pack("<2f", 1.0, 0.0))
    results = [dict(zip(item[0::2], item[1::2], strict=True)) for item in reply["results"]]  # type: ignore[attr-defined]
    assert sorted(row["__key"] for row in results) == ["h:a", "h:b", "h:c"]


@pytest.mark.parametrize(("args", "message"), [
    (["VSIM", "@v", "$q"], "SEARCH argument is required"),
    (["SEARCH", "x"], "VSIM argument is required"),
    (["SEARCH", "x", "VSIM", "@v", "$nope"], "No such parameter `nope`"),
    (["SEARCH", "x", "VSIM", "@v", "abc"], "Error parsing vector similarity query: query vector blob size (3) "
                                           "does not match index's expected size (8)."),
    (["SEARCH", "x", "VSIM", "@v", "$q", "COMBINE", "MAX", "0"], "Unknown COMBINE method `MAX` (RRF or LINEAR)"),
    (["SEARCH", "x", "VSIM", "@v", "$q", "BOGUS"], "Unknown argument `BOGUS` for FT.HYBRID"),
])
def test_bad_hybrid_queries_are_refused(r: redis.Redis, args: list[str], message: str) -> None:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command("FT.HYBRID", "h", *args, "PARAMS", "2", "q", struct.pack("<2f", 1, 0))
    assert str(exc.value) == message
