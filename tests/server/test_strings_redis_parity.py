"""String commands (GETEX GETDEL SETEX PSETEX SETNX MSETNX RENAME RENAMENX GETRANGE SETRANGE APPEND
STRLEN INCR DECR INCRBY DECRBY INCRBYFLOAT SETBIT GETBIT BITCOUNT LCS TYPE COPY): each script runs
against pion-server and Debian's redis-server, and every reply — errors by their text — is the
same. Without redis-server the scripts are skipped; ``test_strings.py`` checks values alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.procs import ServerProcess
from support.redis_oracle import Pair, make_pair, redis_oracle_port  # a fixture, imported so pytest finds it

SCRIPTS: dict[str, list[tuple[Any, ...]]] = {
    "getdel": [("SET", "k", "v"), ("GETDEL", "k"), ("GET", "k"), ("GETDEL", "k"),
               ("HSET", "h", "f", "v"), ("GETDEL", "h"), ("GETDEL",), ("GETDEL", "a", "b")],
    "getex": [("SET", "k", "v"), ("GETEX", "k"), ("GETEX", "k", "EX", "100"), ("TTL", "k"),
              ("GETEX", "k", "PX", "5000"), ("GETEX", "k", "PERSIST"), ("TTL", "k"),
              ("GETEX", "k", "EX", "0"), ("GETEX", "k", "EX", "-5"), ("GETEX", "k", "EX", "x"),
              ("GETEX", "k", "EX"), ("GETEX", "k", "EX", "10", "PX", "10"),
              ("GETEX", "k", "PERSIST", "EX", "10"), ("GETEX", "k", "BOGUS"),
              ("GETEX", "missing", "EX", "0"), ("GETEX", "k", "EXAT", "1"), ("EXISTS", "k"),
              ("HSET", "h", "f", "v"), ("GETEX", "h"), ("GETEX", "k", "ex", "99999999999999999")],
    "setex": [("SETEX", "k", "100", "v"), ("TTL", "k"), ("GET", "k"), ("PSETEX", "p", "100000", "v"),
              ("TTL", "p"), ("SETEX", "k", "0", "v"), ("SETEX", "k", "-1", "v"),
              ("PSETEX", "k", "0", "v"), ("SETEX", "k", "abc", "v"), ("SETEX", "k", "10"),
              ("SETEX", "k", "9223372036854775807", "v"), ("HSET", "h", "f", "v"),
              ("SETEX", "h", "10", "s"), ("TYPE", "h")],
    "setnx_msetnx": [("SETNX", "a", "1"), ("SETNX", "a", "2"), ("GET", "a"),
                     ("MSETNX", "b", "1", "c", "2"), ("MSETNX", "c", "3", "d", "4"), ("MGET", "b", "c", "d"),
                     ("MSETNX", "x", "1", "y"), ("MSETNX", "e", "1", "e", "2"), ("GET", "e")],
    "rename": [("SET", "a", "1"), ("EXPIRE", "a", "100"), ("RENAME", "a", "b"), ("TTL", "b"),
               ("EXISTS", "a"), ("RENAME", "missing", "x"), ("RENAME", "b", "b"), ("SET", "c", "3"),
               ("RENAMENX", "b", "c"), ("RENAMENX", "b", "b"), ("RENAMENX", "b", "d"), ("GET", "d"),
               ("RENAMENX", "missing", "z"), ("HSET", "h", "f", "v"), ("RENAME", "h", "c"),
               ("TYPE", "c"), ("HGET", "c", "f")],
    "getrange": [("SET", "k", "Hello World"), ("GETRANGE", "k", "0", "4"), ("GETRANGE", "k", "-5", "-1"),
                 ("GETRANGE", "k", "-1", "-5"), ("GETRANGE", "k", "5", "2"), ("GETRANGE", "k", "0", "100"),
                 ("GETRANGE", "k", "-100", "2"), ("GETRANGE", "k", "100", "200"),
                 ("GETRANGE", "missing", "0", "-1"), ("GETRANGE", "k", "a", "1"), ("SUBSTR", "k", "0", "2"),
                 ("SET", "e", ""), ("GETRANGE", "e", "0", "-1"), ("HSET", "h", "f", "v"),
                 ("GETRANGE", "h", "0", "1")],
    "setrange": [("SETRANGE", "k", "5", "xy"), ("GET", "k"), ("SETRANGE", "k", "0", "ab"),
                 ("SETRANGE", "k", "1", ""), ("SETRANGE", "missing", "3", ""), ("EXISTS", "missing"),
                 ("SETRANGE", "k", "-1", "z"), ("SETRANGE", "k", "x", "z"),
                 ("SETRANGE", "k", "536870912", "z"), ("SETRANGE", "k", "536870911", ""),
                 ("HSET", "h", "f", "v"), ("SETRANGE", "h", "0", "x"), ("GET", "k")],
    "append_strlen": [("APPEND", "k", "ab"), ("APPEND", "k", "cd"), ("GET", "k"), ("STRLEN", "k"),
                      ("STRLEN", "missing"), ("APPEND", "k", ""), ("HSET", "h", "f", "v"),
                      ("APPEND", "h", "x"), ("STRLEN", "h"), ("SET", "n", "12"), ("APPEND", "n", "3"),
                      ("INCR", "n")],
    "incr": [("INCR", "n"), ("INCRBY", "n", "41"), ("DECR", "n"), ("DECRBY", "n", "-10"),
             ("INCRBY", "n", "007"), ("INCRBY", "n", "+1"), ("INCRBY", "n", " 1"),
             ("INCRBY", "n", "1.5"), ("SET", "big", "9223372036854775807"), ("INCR", "big"),
             ("SET", "small", "-9223372036854775808"), ("DECR", "small"),
             ("DECRBY", "n", "-9223372036854775808"), ("SET", "s", "abc"), ("INCR", "s"),
             ("SET", "z", "01"), ("INCR", "z"), ("SET", "m", "-0"), ("INCR", "m"),
             ("SET", "w", " 5"), ("INCR", "w"), ("HSET", "h", "f", "1"), ("INCR", "h"),
             ("INCRBY", "n", "99999999999999999999"), ("GET", "n")],
    "incrbyfloat": [("INCRBYFLOAT", "f", "10.5"), ("INCRBYFLOAT", "f", "0.1"), ("INCRBYFLOAT", "f", "-5"),
                    ("INCRBYFLOAT", "f", "5.0e3"), ("INCRBYFLOAT", "f", "2.0e-2"), ("SET", "g", "3"),
                    ("INCRBYFLOAT", "g", "1.5"), ("INCRBYFLOAT", "g", "abc"), ("INCRBYFLOAT", "g", " 1"),
                    ("INCRBYFLOAT", "g", "nan"), ("INCRBYFLOAT", "g", "inf"), ("INCRBYFLOAT", "g", "1e5000"),
                    ("SET", "t", "1.5x"), ("INCRBYFLOAT", "t", "1"), ("INCRBYFLOAT", "g", "-4.5"),
                    ("INCRBYFLOAT", "g", "1e-400"), ("INCRBYFLOAT", "u", "1e20"), ("INCRBYFLOAT", "u", ".5"),
                    ("HSET", "h", "f", "1"), ("INCRBYFLOAT", "h", "1")],
    "bits": [("SETBIT", "b", "7", "1"), ("SETBIT", "b", "7", "0"), ("SETBIT", "b", "100", "1"),
             ("GET", "b"), ("GETBIT", "b", "100"), ("GETBIT", "b", "101"), ("GETBIT", "b", "99999"),
             ("GETBIT", "missing", "0"), ("SETBIT", "b", "-1", "1"), ("SETBIT", "b", "1", "2"),
             ("SETBIT", "b", "4294967296", "1"), ("SETBIT", "b", "x", "1"), ("GETBIT", "b", "-1"),
             ("SET", "c", "foobar"), ("BITCOUNT", "c"), ("BITCOUNT", "c", "0", "0"),
             ("BITCOUNT", "c", "1", "1"), ("BITCOUNT", "c", "1", "1", "BYTE"), ("BITCOUNT", "c", "5", "30", "BIT"),
             ("BITCOUNT", "c", "-3", "-1", "bit"), ("BITCOUNT", "c", "-1", "-3"), ("BITCOUNT", "c", "0"),
             ("BITCOUNT", "c", "0", "1", "BOGUS"), ("BITCOUNT", "missing"), ("BITCOUNT", "missing", "0", "1"),
             ("BITCOUNT", "c", "a", "1"), ("HSET", "h", "f", "v"), ("BITCOUNT", "h"), ("SETBIT", "h", "1", "1"),
             ("GETBIT", "h", "1")],
    "lcs": [("SET", "a", "ohmytext"), ("SET", "b", "mynewtext"), ("LCS", "a", "b"), ("LCS", "a", "b", "LEN"),
            ("LCS", "a", "b", "IDX"), ("LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"),
            ("LCS", "a", "b", "IDX", "WITHMATCHLEN"), ("LCS", "a", "b", "LEN", "IDX"),
            ("LCS", "a", "b", "MINMATCHLEN"), ("LCS", "a", "b", "MINMATCHLEN", "x"), ("LCS", "a", "b", "BOGUS"),
            ("LCS", "a", "missing"), ("LCS", "missing", "a", "IDX"), ("SET", "c", "abcabcabc"),
            ("SET", "d", "xbcaxcab"), ("LCS", "c", "d", "IDX", "WITHMATCHLEN"), ("LCS", "d", "c", "IDX"),
            ("HSET", "h", "f", "v"), ("LCS", "a", "h"), ("LCS", "a")],
    "type_copy": [("SET", "s", "v"), ("HSET", "h", "f", "v"), ("TYPE", "s"), ("TYPE", "h"), ("TYPE", "no"),
                  ("EXPIRE", "s", "100"), ("COPY", "s", "t"), ("TTL", "t"), ("GET", "t"), ("COPY", "s", "t"),
                  ("COPY", "s", "t", "REPLACE"), ("COPY", "h", "h2"), ("HGETALL", "h2"), ("HSET", "h2", "g", "w"),
                  ("HLEN", "h"), ("COPY", "s", "s"), ("COPY", "missing", "x"), ("COPY", "s", "u", "DB", "1"),
                  ("COPY", "s", "u", "DB", "16"), ("COPY", "s", "u", "DB", "x"), ("COPY", "s", "u", "BOGUS"),
                  ("COPY", "s", "s", "DB", "0"), ("COPY", "s", "s", "DB", "1"), ("COPY", "s", "s", "DB", "1"),
                  ("SELECT", "1"), ("GET", "u"), ("TTL", "s"), ("SELECT", "0")],
}


@pytest.fixture
def pair(shared_pion_server: ServerProcess, redis_oracle_port: int) -> Iterator[Pair]:
    yield from make_pair(shared_pion_server.port, redis_oracle_port)


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_every_reply_of_the_script_equals_redis_servers(pair: Pair, name: str) -> None:
    pair.run(SCRIPTS[name])
    assert_same_contents(pair)


def assert_same_contents(pair: Pair) -> None:
    """Every key left on both servers: the same names, types and values."""
    keys = sorted(pair.pion.keys("*"))
    assert keys == sorted(pair.redis.keys("*"))
    for key in keys:
        if pair.same("TYPE", key) == b"string":
            pair.same("GET", key)
        else:
            pair.same("HGETALL", key)
