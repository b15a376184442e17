"""Hashes beside strings in a real pion-server: memory budget, SCAN TYPE, TTL, argument errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from support.procs import ServerProcess, start_server
from support.replies import err


def test_hset_that_cannot_fit_the_memory_budget_is_refused_and_records_nothing(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", "200000", "--maxmemory-policy", "noeviction")
    try:
        with server.client() as r:
            assert r.hset("h", mapping={"a": b"x" * 100_000}) == 1
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                r.hset("h", mapping={"b": b"y" * 150_000})
            assert r.hkeys("h") == [b"a"]
            assert r.hset("h", "a", b"small") == 0  # shrinking always fits
    finally:
        server.stop()


def test_scan_type_and_keyspace_commands_see_hashes(shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client() as r:
        r.hset("scan:h", "f", "v")
        r.set("scan:s", "v")
        cursor, keys = r.scan(0, match="scan:*", count=1000, _type="hash")
        assert (cursor, keys) == (0, [b"scan:h"])
        assert r.scan(0, match="scan:*", count=1000, _type="string") == (0, [b"scan:s"])
        assert r.exists("scan:h", "scan:s") == 2
        assert r.mget("scan:h", "scan:s") == [None, b"v"]
        assert r.pexpire("scan:h", 50) is True
        time.sleep(0.1)
        assert (r.type("scan:h"), r.hgetall("scan:h")) == (b"none", {})


def test_hash_argument_errors_use_redis_wording(shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client() as r:
        assert err(r, "HSET", "args:h", "f") == "wrong number of arguments for 'hset' command"
        assert err(r, "HMSET", "args:h", "f", "v", "g") == "wrong number of arguments for 'hmset' command"
        assert err(r, "HGET", "args:h") == "wrong number of arguments for 'hget' command"
        assert err(r, "HINCRBY", "args:h", "f", "x") == "value is not an integer or out of range"
        r.hset("args:h", "big", str(2**63 - 1))
        assert err(r, "HINCRBY", "args:h", "big", "1") == "increment or decrement would overflow"
        assert r.hgetall("args:h") == {b"big": str(2**63 - 1).encode()}
        assert r.hsetnx("args:h", "big", "0") == 0
        assert r.hsetnx("args:h", "new", "1") == 1
        assert r.hstrlen("args:h", "new") == 1
