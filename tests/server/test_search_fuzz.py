"""Random FT.* and hash commands built from the search vocabulary: the server stays up,
the connection keeps answering, a refused command changes nothing and nothing crashes
(the general fuzzer draws from every command; this one aims at the query language)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.procs import ServerProcess
from support.redisearch import HAS_HNSWLIB

QUERY_PIECES = ["*", "@t:", "@g:", "@n:", "@v:", "{", "}", "[", "]", "(", ")", "|", "-", "~", "\"", "$b", "$k",
                "=>", "[KNN", "KNN", "3", "@v", "AS", "s", "EF_RUNTIME", "hello", "wor*", " ", "-inf", "+inf",
                "(1", "\\", "x", "0", "1e400", "nan"]
QUERY = st.lists(st.sampled_from(QUERY_PIECES), max_size=12).map("".join)
OPTION_WORDS = [b"NOCONTENT", b"WITHSCORES", b"RETURN", b"SORTBY", b"LIMIT", b"PARAMS", b"DIALECT", b"FILTER",
                b"INKEYS", b"ASC", b"DESC", b"n", b"t", b"s", b"b", b"k", b"0", b"1", b"2", b"3", b"-1",
                b"99999999999", struct.pack("<2f", 1, 0), b"abc", b"\xff"]
HYBRID_WORDS = [b"SEARCH", b"VSIM", b"@v", b"$b", b"KNN", b"K", b"COMBINE", b"RRF", b"LINEAR", b"LOAD",
                b"FILTER", b"CONSTANT", b"WINDOW", b"*", b"hello", b"2", b"0", b"PARAMS", b"b",
                struct.pack("<2f", 1, 0)]
CREATE_WORDS = [b"ON", b"HASH", b"JSON", b"PREFIX", b"SCHEMA", b"TEXT", b"TAG", b"NUMERIC", b"VECTOR", b"FLAT",
                b"HNSW", b"TYPE", b"FLOAT32", b"DIM", b"DISTANCE_METRIC", b"COSINE", b"L2", b"M", b"6", b"2",
                b"0", b"x", b"f:", b"AS", b"SORTABLE", b"SEPARATOR", b"WEIGHT", b"STOPWORDS"]


def _command(data: st.DataObject) -> list[Any]:
    kind = data.draw(st.sampled_from(["search", "hybrid", "create", "drop", "hash"]))
    if kind == "search":
        return ["FT.SEARCH", data.draw(st.sampled_from(["fz", "missing"])), data.draw(QUERY),
                *data.draw(st.lists(st.sampled_from(OPTION_WORDS), max_size=8))]
    if kind == "hybrid":
        return ["FT.HYBRID", "fz", *data.draw(st.lists(st.sampled_from(HYBRID_WORDS), max_size=12))]
    if kind == "create":
        return ["FT.CREATE", data.draw(st.sampled_from(["fz", "fz2"])),
                *data.draw(st.lists(st.sampled_from(CREATE_WORDS), max_size=14))]
    if kind == "drop":
        return ["FT.DROPINDEX", *data.draw(st.lists(st.sampled_from([b"fz2", b"DD", b"x"]), max_size=3))]
    name = data.draw(st.sampled_from(["HSET", "HDEL", "HGET", "HINCRBY", "HMGET", "HSETNX"]))
    return [name, *data.draw(st.lists(st.sampled_from([b"f:1", b"f:s", b"t", b"n", b"v", b"1", b"x",
                                                       struct.pack("<2f", 1, 0)]), max_size=6))]


@pytest.fixture(scope="module")
def conn(shared_pion_server: ServerProcess) -> Iterator[redis.Redis]:
    with shared_pion_server.client(socket_timeout=60) as client:
        yield client


def _seed(r: redis.Redis) -> None:
    pipe = r.pipeline(transaction=False)
    pipe.execute_command("FLUSHALL")
    for name in r.execute_command("FT._LIST"):
        pipe.execute_command("FT.DROPINDEX", name)
    pipe.execute_command("FT.CREATE", "fz", "PREFIX", "1", "f:", "SCHEMA", "t", "TEXT", "g", "TAG", "n", "NUMERIC",
                         "v", "VECTOR", "HNSW" if HAS_HNSWLIB else "FLAT", "6", "TYPE", "FLOAT32", "DIM", "2",
                         "DISTANCE_METRIC", "L2")
    pipe.hset("f:1", mapping={"t": "hello world", "g": "a", "n": 1, "v": struct.pack("<2f", 1, 0)})
    pipe.set("f:s", "a string")
    pipe.execute(raise_on_error=False)


def _state(r: redis.Redis) -> list[Any]:
    pipe = r.pipeline(transaction=False)
    pipe.execute_command("FT._LIST")
    pipe.keys("*")
    pipe.hgetall("f:1")
    pipe.execute_command("FT.SEARCH", "fz", "*", "NOCONTENT")
    pipe.execute_command("PION.STATS")
    replies = pipe.execute(raise_on_error=False)
    replies[0], replies[1] = sorted(replies[0]), sorted(replies[1])
    stats = replies[4]
    replies[4] = [v for k, v in zip(stats[0::2], stats[1::2], strict=True) if k not in (b"uptime_seconds", b"vector_queries")]
    return replies


@settings(max_examples=250, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_search_commands_never_break_the_server_and_errors_change_nothing(
        data: st.DataObject, conn: redis.Redis, shared_pion_server: ServerProcess) -> None:
    _seed(conn)
    before = _state(conn)
    command = _command(data)
    try:
        conn.execute_command(*command)
        rejected = False
    except redis.ResponseError:
        rejected = True
    assert conn.ping() is True
    assert shared_pion_server.proc.poll() is None
    if rejected:
        assert _state(conn) == before, f"{command!r} was refused but changed state"


def test_search_fuzzing_left_no_internal_errors_in_the_log(shared_pion_server: ServerProcess) -> None:
    assert "Traceback" not in shared_pion_server.log()
