"""Hypothesis drives random sequences of string, rename and copy commands — good and bad
arguments mixed — into pion-server and Debian's redis-server: every reply, errors included, and
the keys left must be the same. Without redis-server, the same sequences must leave a server
that answers and whose STRLEN/GET/TYPE agree with each other."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.procs import ServerProcess
from support.redis_oracle import Pair, make_pair, redis_oracle_port  # a fixture, imported so pytest finds it

KEYS = st.sampled_from(["a", "b", "c", "h"])
VALUES = st.one_of(st.sampled_from(["", "0", "1", "-7", "12", "9223372036854775807", "1.5", "x y", "foobar",
                                    "\x00\xff"]),
                   st.binary(max_size=12))
INTS = st.one_of(st.integers(-20, 40).map(str),
                 st.sampled_from(["-9223372036854775808", "9223372036854775807", "007", "x", "", "+3",
                                  "4294967295", "4294967296", "99999999999999999999"]))
FLOATS = st.sampled_from(["0.1", "-2.5", "1e3", "3", "abc", "inf", "1e5000", ".5", "-0", "1.0e-2", " 1"])
BIT = st.sampled_from(["0", "1", "2", "x"])


def _commands() -> st.SearchStrategy[tuple[Any, ...]]:
    k = KEYS
    return st.one_of(
        st.tuples(st.just("SET"), k, VALUES),
        st.tuples(st.just("GET"), k),
        st.tuples(st.just("GETDEL"), k),
        st.tuples(st.just("GETEX"), k, st.sampled_from(["EX", "PX", "PERSIST", "BOGUS"]), INTS),
        st.tuples(st.just("SETEX"), k, INTS, VALUES),
        st.tuples(st.just("SETNX"), k, VALUES),
        st.tuples(st.just("MSETNX"), k, VALUES, k, VALUES),
        st.tuples(st.sampled_from(["RENAME", "RENAMENX"]), k, k),
        st.tuples(st.just("GETRANGE"), k, INTS, INTS),
        st.tuples(st.just("SETRANGE"), k, st.integers(-2, 30).map(str), VALUES),
        st.tuples(st.just("APPEND"), k, VALUES),
        st.tuples(st.just("STRLEN"), k),
        st.tuples(st.sampled_from(["INCR", "DECR"]), k),
        st.tuples(st.sampled_from(["INCRBY", "DECRBY"]), k, INTS),
        st.tuples(st.just("INCRBYFLOAT"), k, FLOATS),
        st.tuples(st.just("SETBIT"), k, st.integers(-1, 100).map(str), BIT),
        st.tuples(st.just("GETBIT"), k, INTS),
        st.tuples(st.just("BITCOUNT"), k, INTS, INTS, st.sampled_from(["BIT", "BYTE", "NOPE"])),
        st.tuples(st.just("BITCOUNT"), k, INTS, INTS),
        st.tuples(st.just("LCS"), k, k, st.sampled_from(["LEN", "IDX", "WITHMATCHLEN", "MINMATCHLEN"]),
                  st.sampled_from(["IDX", "2", "LEN"])),
        st.tuples(st.just("TYPE"), k),
        st.tuples(st.just("COPY"), k, k, st.sampled_from(["REPLACE", "DB", "X"]), st.sampled_from(["1", "0", "16"])),
        st.tuples(st.just("HSET"), k, st.just("f"), VALUES),
        st.tuples(st.just("DEL"), k),
    )


SEQUENCES = st.lists(_commands(), min_size=1, max_size=15)
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def pair(shared_pion_server: ServerProcess, redis_oracle_port: int) -> Iterator[Pair]:
    yield from make_pair(shared_pion_server.port, redis_oracle_port)


@FUZZ
@given(script=SEQUENCES)
def test_random_string_command_sequences_answer_exactly_as_redis_server(pair: Pair,
                                                                       script: list[tuple[Any, ...]]) -> None:
    for db in (0, 1):
        pair.pion.execute_command("SELECT", db)
        pair.redis.execute_command("SELECT", db)
        pair.pion.flushdb()
        pair.redis.flushdb()
    pair.pion.execute_command("SELECT", 0)
    pair.redis.execute_command("SELECT", 0)
    pair.run(script)
    for key in ("a", "b", "c", "h"):
        if pair.same("TYPE", key) == b"string":
            pair.same("GET", key)
        elif pair.same("TYPE", key) == b"hash":
            pair.same("HGETALL", key)


@FUZZ
@given(script=SEQUENCES)
def test_random_string_command_sequences_leave_a_consistent_answering_server(
        shared_pion_server: ServerProcess, script: list[tuple[Any, ...]]) -> None:
    with shared_pion_server.client() as conn:
        conn.flushdb()
        for command in script:
            try:
                conn.execute_command(*command)
            except redis.ResponseError:
                pass
        assert conn.ping() is True
        for key in ("a", "b", "c", "h"):
            kind = conn.type(key)
            if kind == b"string":
                value = conn.get(key)
                assert value is not None
                assert conn.strlen(key) == len(value)
            else:
                assert kind in (b"hash", b"none")
