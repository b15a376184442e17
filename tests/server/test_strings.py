"""String commands' values and persistence without an oracle: the results Redis documents, and
every computed value (INCR, APPEND, SETRANGE, SETBIT, INCRBYFLOAT, RENAME, COPY, GETDEL, GETEX)
back after a kill -9 in database 0, where they are logged as plain SET/DEL/EXPIRE records."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from support.procs import ServerProcess, start_server


def test_documented_examples_give_the_documented_results(shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client() as r:
        r.set("doc:key1", "Hello World")
        assert r.setrange("doc:key1", 6, "Redis") == 11
        assert r.get("doc:key1") == b"Hello Redis"
        assert r.setrange("doc:key2", 6, "Redis") == 11
        assert r.get("doc:key2") == b"\x00" * 6 + b"Redis"
        r.set("doc:mykey", "This is a string")
        assert [r.getrange("doc:mykey", a, b) for a, b in ((0, 3), (-3, -1), (0, -1), (10, 100))] == [
            b"This", b"ing", b"This is a string", b"string"]
        r.set("doc:f", "10.50")
        assert r.incrbyfloat("doc:f", 0.1) == 10.6
        r.set("doc:e", "5.0e3")
        assert r.incrbyfloat("doc:e", 2.0e2) == 5200
        r.set("doc:b", "foobar")
        assert (r.bitcount("doc:b"), r.bitcount("doc:b", 0, 0), r.bitcount("doc:b", 1, 1)) == (26, 4, 6)
        assert r.execute_command("BITCOUNT", "doc:b", 5, 30, "BIT") == 17
        r.mset({"doc:k1": "ohmytext", "doc:k2": "mynewtext"})
        assert r.execute_command("LCS", "doc:k1", "doc:k2") == b"mytext"
        assert r.execute_command("LCS", "doc:k1", "doc:k2", "LEN") == 6
        assert r.execute_command("LCS", "doc:k1", "doc:k2", "IDX", "MINMATCHLEN", 4, "WITHMATCHLEN") == [
            b"matches", [[[4, 7], [5, 8], 4]], b"len", 6]
        assert r.msetnx({"doc:n1": "a", "doc:n2": "b"}) is True
        assert r.msetnx({"doc:n2": "c", "doc:n3": "d"}) is False
        assert r.mget("doc:n1", "doc:n2", "doc:n3") == [b"a", b"b", None]


def test_lcs_idx_replies_with_a_map_under_resp3(shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client(protocol=3) as r:
        r.mset({"r3:a": "ohmytext", "r3:b": "mynewtext"})
        assert r.execute_command("LCS", "r3:a", "r3:b", "IDX") == {
            b"matches": [[[4, 7], [5, 8]], [[2, 3], [0, 1]]], b"len": 6}


def test_a_bad_argument_changes_nothing(shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client() as r:
        r.set("bad:k", "v")
        for command in (("SETRANGE", "bad:k", "-1", "x"), ("INCR", "bad:k"), ("SETBIT", "bad:k", "1", "5"),
                        ("GETEX", "bad:k", "EX", "0"), ("INCRBYFLOAT", "bad:k", "nan"),
                        ("SETEX", "bad:k", "0", "w"), ("RENAME", "bad:none", "bad:k")):
            with pytest.raises(redis.ResponseError):
                r.execute_command(*command)
        assert (r.get("bad:k"), r.ttl("bad:k")) == (b"v", -1)


def test_computed_values_in_database_0_come_back_after_kill_9(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        with server.client() as r:
            r.incrby("n", 5)
            r.decr("n")
            r.append("s", "ab")
            r.setrange("s", 4, "Z")
            r.setbit("bits", 3, 1)
            r.incrbyfloat("f", "1.25")
            r.set("old", "x", ex=1000)
            r.rename("old", "new")
            r.copy("new", "copy")
            r.set("gone", "g")
            r.getdel("gone")
            r.set("later", "l")
            r.getex("later", ex=500)
            r.set("kept", "k", ex=500)
            r.getex("kept", persist=True)
            before = {k: (r.get(k), r.ttl(k) > 0) for k in sorted(r.keys("*"))}
        assert before == {b"bits": (b"\x10", False), b"copy": (b"x", True), b"f": (b"1.25", False),
                          b"kept": (b"k", False), b"later": (b"l", True), b"n": (b"4", False),
                          b"new": (b"x", True), b"s": (b"ab\x00\x00Z", False)}
        server.kill9()
        server = start_server(tmp_path / "data", port=server.port)
        with server.client() as r:
            assert {k: (r.get(k), r.ttl(k) > 0) for k in sorted(r.keys("*"))} == before
    finally:
        server.stop()


def test_lcs_refuses_a_table_too_big_to_fill_without_stalling_the_server(
        shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client() as r:
        r.mset({"lcs:a": "a" * 5000, "lcs:b": "b" * 5000})
        with pytest.raises(redis.ResponseError, match="more than 16777216 cells"):
            r.execute_command("LCS", "lcs:a", "lcs:b")
        assert r.ping() is True
