"""Numbered databases (SELECT, FLUSHDB, SWAPDB, MOVE, DBSIZE, COPY ... DB): the same replies as
Debian's redis-server, survival across a kill -9 and a snapshot, and LMCache's
``redis://host:port/1`` remote URL (redis-py ``db=1``) storing and finding its chunks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from support.procs import ServerProcess, start_server
from support.redis_oracle import Pair, make_pair, redis_oracle_port  # a fixture, imported so pytest finds it

SCRIPT: list[tuple[Any, ...]] = [
    ("SET", "a", "0"), ("SELECT", "1"), ("SET", "a", "1"), ("SET", "b", "1"), ("DBSIZE",),
    ("SELECT", "0"), ("DBSIZE",), ("GET", "a"), ("SELECT", "16"), ("SELECT", "-1"), ("SELECT", "x"),
    ("SELECT", "01"), ("SELECT", " 1"), ("SELECT", "99999999999"), ("SWAPDB", "0", "1"), ("GET", "a"),
    ("DBSIZE",), ("SWAPDB", "0", "0"), ("SWAPDB", "x", "1"), ("SWAPDB", "1", "x"), ("SWAPDB", "99", "x"),
    ("SWAPDB", "0", "16"), ("SWAPDB", "-1", "0"), ("MOVE", "b", "2"), ("MOVE", "b", "2"), ("MOVE", "a", "0"),
    ("MOVE", "a", "16"), ("MOVE", "a", "x"), ("MOVE", "missing", "3"), ("SET", "c", "x"), ("EXPIRE", "c", "100"),
    ("MOVE", "c", "3"), ("SELECT", "3"), ("TTL", "c"), ("SET", "a", "3"), ("SELECT", "0"), ("MOVE", "a", "3"),
    ("HSET", "h", "f", "v"), ("MOVE", "h", "4"), ("SELECT", "4"), ("HGETALL", "h"), ("TYPE", "h"),
    ("COPY", "h", "h", "DB", "5"), ("SELECT", "5"), ("HGETALL", "h"), ("FLUSHDB",), ("DBSIZE",),
    ("FLUSHDB", "ASYNC"), ("FLUSHDB", "SYNC"), ("FLUSHDB", "BOGUS"), ("FLUSHDB", "SYNC", "ASYNC"),
    ("SELECT", "4"), ("DBSIZE",), ("SELECT", "0"), ("DBSIZE",), ("FLUSHALL",), ("SELECT", "4"), ("DBSIZE",),
]


@pytest.fixture
def pair(shared_pion_server: ServerProcess, redis_oracle_port: int) -> Iterator[Pair]:
    yield from make_pair(shared_pion_server.port, redis_oracle_port)


def test_select_swapdb_move_flushdb_and_dbsize_answer_as_redis_does(pair: Pair) -> None:
    pair.run(SCRIPT)


def test_keys_in_one_database_are_invisible_in_the_others(shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client(db=2) as two, shared_pion_server.client(db=3) as three:
        two.set("vis:k", "two")
        assert three.get("vis:k") is None
        assert three.exists("vis:k") == 0
        three.set("vis:k", "three")
        assert (two.get("vis:k"), three.get("vis:k")) == (b"two", b"three")
        assert three.keys("vis:*") == [b"vis:k"]
        two.flushdb()
        assert (two.get("vis:k"), three.get("vis:k")) == (None, b"three")
        info = three.info("keyspace")
        assert info["db3"]["keys"] == 1
        three.delete("vis:k")


def test_lmcache_pointed_at_database_1_stores_finds_and_reloads_its_chunks(tmp_path: Path) -> None:
    """LMCache's RedisConnector: ``redis.Redis.from_url(url)`` and per chunk a metadata key and a
    ``kv_bytes`` key, looked up with EXISTS — through ``redis://127.0.0.1:port/1``."""
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    chunk = bytes(range(256)) * 256  # 64 KiB, LMCache's smallest chunk shape
    try:
        url = f"redis://127.0.0.1:{server.port}/1"
        lm = redis.Redis.from_url(url)
        for i in range(4):
            lm.set(f"vllm@model@{i}metadata", b"meta%d" % i)
            lm.set(f"vllm@model@{i}kv_bytes", chunk[i:] + chunk[:i])
        assert lm.exists(*[f"vllm@model@{i}kv_bytes" for i in range(4)]) == 4
        assert lm.get("vllm@model@2kv_bytes") == chunk[2:] + chunk[:2]
        with server.client() as db0:
            assert db0.dbsize() == 0
        lm.close()
        server.kill9()
        server = start_server(tmp_path / "data", port=server.port)
        lm = redis.Redis.from_url(url)
        assert lm.dbsize() == 8
        assert [lm.get(f"vllm@model@{i}kv_bytes") == chunk[i:] + chunk[:i] for i in range(4)] == [True] * 4
        assert lm.get("vllm@model@3metadata") == b"meta3"
        lm.close()
    finally:
        server.stop()


def _contents(server: ServerProcess, databases: int = 16) -> dict[int, dict[bytes, Any]]:
    out: dict[int, dict[bytes, Any]] = {}
    for db in range(databases):
        with server.client(db=db) as conn:
            keys = sorted(conn.keys("*"))
            values: dict[bytes, Any] = {}
            for key in keys:
                kind = conn.type(key)
                ttl = conn.ttl(key)
                value = conn.get(key) if kind == b"string" else conn.hgetall(key)
                values[key] = (value, ttl > 0)
            if values:
                out[db] = values
    return out


def _write_everything(server: ServerProcess) -> None:
    with server.client(db=1) as one, server.client(db=0) as zero, server.client(db=7) as seven:
        zero.set("z", "zero")
        one.set("s", "one")
        one.set("gone", "x")
        one.delete("gone")
        one.execute_command("SETEX", "ttl", "1000", "t")
        one.hset("h", mapping={"f": "v", "g": "w"})
        one.hdel("h", "g")
        one.incrby("n", 41)
        one.append("s", "+")
        one.setrange("s", 0, "O")
        one.rename("s", "renamed")
        one.copy("renamed", "copied", destination_db=7)
        one.move("n", 2)
        seven.set("x", "7")
        seven.flushdb()
        seven.set("y", "7")
        zero.execute_command("SWAPDB", "3", "7")
        one.setbit("bits", 9, 1)
        one.getdel("renamed")
        one.set("e", "v")
        one.getex("e", ex=500)


def test_every_database_survives_a_kill_9_and_a_snapshot_reload(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        _write_everything(server)
        before = _contents(server)
        assert before == {
            0: {b"z": (b"zero", False)},
            1: {b"ttl": (b"t", True), b"h": ({b"f": b"v"}, False), b"bits": (b"\x00\x40", False),
                b"e": (b"v", True)},
            2: {b"n": (b"41", False)},
            3: {b"y": (b"7", False)},
        }
        server.kill9()
        server = start_server(tmp_path / "data", port=server.port)
        assert _contents(server) == before  # the WAL's *Db records
        with server.client() as conn:
            assert conn.save() is True
        server.stop()
        server = start_server(tmp_path / "data", port=server.port)
        assert _contents(server) == before  # the snapshot's
    finally:
        server.stop()


def test_a_data_directory_with_more_databases_than_configured_refuses_to_start(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    with server.client(db=9) as conn:
        conn.set("k", "v")
    server.stop()
    with pytest.raises(RuntimeError, match="database 9 is out of range"):
        start_server(tmp_path / "data", "--databases", "4", port=server.port, wait_s=15)


def test_v_store_and_kv_prefix_are_global_whatever_the_connection_selected(
        shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client(db=5) as five, shared_pion_server.client() as zero:
        five.execute_command("V.CREATE", "glob:s", "4")
        assert zero.execute_command("V.INFO", "glob:s") is not None
        zero.execute_command("V.DROP", "glob:s")


def test_ft_indexes_follow_database_0_through_swapdb(pion_server: ServerProcess) -> None:
    with pion_server.client() as zero, pion_server.client(db=1) as one:
        zero.hset("doc:a", "t", "hello")
        zero.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "t", "TEXT")
        one.hset("doc:b", "t", "hello")  # database 1: not indexed
        assert zero.execute_command("FT.SEARCH", "idx", "hello") == [1, b"doc:a", [b"t", b"hello"]]
        zero.swapdb(0, 1)
        assert zero.execute_command("FT.SEARCH", "idx", "hello") == [1, b"doc:b", [b"t", b"hello"]]
        assert one.hgetall("doc:a") == {b"t": b"hello"}
