"""--maxmemory-policy through a real pion-server: which keys leave when a write would pass
--maxmemory (Redis's meanings, sampled like Redis), INFO's evicted_keys, CONFIG GET/SET of the
budget at run time, the budget shared with the V-store, and evictions surviving a kill -9."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from support.procs import ServerProcess, start_server

VALUE = b"v" * 1000
ENTRY = 1000 + 6 + 96  # value + a 6-byte key + the keyspace's per-entry overhead
BUDGET = 100_000  # about 90 such keys


@pytest.fixture
def lru_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = start_server(tmp_path / "data", "--maxmemory", str(BUDGET), "--appendfsync", "always")
    try:
        yield server
    finally:
        server.stop()


def evicted(conn: redis.Redis) -> int:
    return int(conn.info("stats")["evicted_keys"])


def test_allkeys_lru_keeps_accepting_writes_and_keeps_the_keys_read_most_recently(
        lru_server: ServerProcess) -> None:
    hot = [b"hot:%02d" % i for i in range(5)]
    with lru_server.client() as conn:
        for key in hot:
            conn.set(key, VALUE)
        for i in range(300):
            assert conn.set(b"k:%04d" % i, VALUE) is True
            conn.mget(hot)  # read after every write: always the most recently used
        assert conn.exists(*hot) == 5
        size = conn.dbsize()
        assert BUDGET // ENTRY - 5 <= size <= BUDGET // ENTRY
        assert evicted(conn) == 305 - size
        assert conn.exists(b"k:0299") == 1  # the newest key stays
        assert conn.info("memory")["maxmemory_policy"] == "allkeys-lru"


def test_evictions_are_logged_so_a_restart_after_kill_9_has_the_same_keys(
        lru_server: ServerProcess) -> None:
    with lru_server.client() as conn:
        for i in range(200):
            conn.set(b"k:%04d" % i, VALUE)
        before = sorted(conn.keys("*"))
    lru_server.kill9()
    again = start_server(lru_server.data_dir, "--maxmemory", str(BUDGET), port=lru_server.port)
    try:
        with again.client() as conn:
            assert sorted(conn.keys("*")) == before
    finally:
        again.stop()


def test_noeviction_refuses_the_write_that_does_not_fit_and_keeps_every_key(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", str(BUDGET), "--maxmemory-policy", "noeviction")
    try:
        with server.client() as conn:
            stored = 0
            with pytest.raises(redis.exceptions.OutOfMemoryError,
                               match="command not allowed when used memory > 'maxmemory'"):
                for i in range(200):
                    conn.set(b"k:%04d" % i, VALUE)
                    stored += 1
            assert conn.dbsize() == stored
            assert evicted(conn) == 0
            assert conn.get(b"k:0000") == VALUE
    finally:
        server.stop()


def test_volatile_ttl_evicts_only_keys_with_a_ttl_nearest_deadline_first(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", str(BUDGET), "--maxmemory-policy", "volatile-ttl",
                          "--maxmemory-samples", "64")
    try:
        with server.client() as conn:
            for i in range(40):
                conn.set(b"p:%04d" % i, VALUE)  # no TTL: never a victim
            for i in range(40):
                conn.set(b"t:%04d" % i, VALUE, ex=1000 + i)  # t:0000 expires first
            for i in range(40):
                conn.set(b"n:%04d" % i, VALUE, ex=100_000)
            assert conn.exists(*[b"p:%04d" % i for i in range(40)]) == 40
            assert conn.exists(b"n:0039") == 1
            assert conn.exists(b"t:0000") == 0
            assert evicted(conn) == 120 - conn.dbsize()
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                for i in range(200):  # once no key has a TTL left, the write is refused
                    conn.set(b"q:%04d" % i, VALUE)
            assert conn.exists(*[b"p:%04d" % i for i in range(40)]) == 40
    finally:
        server.stop()


def test_volatile_lru_without_any_key_with_a_ttl_behaves_like_noeviction(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", str(BUDGET), "--maxmemory-policy", "volatile-lru")
    try:
        with server.client() as conn:
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                for i in range(200):
                    conn.set(b"k:%04d" % i, VALUE)
            assert evicted(conn) == 0
    finally:
        server.stop()


def test_allkeys_lfu_keeps_the_keys_read_often(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", str(BUDGET), "--maxmemory-policy", "allkeys-lfu",
                          "--maxmemory-samples", "10")
    try:
        with server.client() as conn:
            hot = [b"hot:%02d" % i for i in range(5)]
            for key in hot:
                conn.set(key, VALUE)
            for _ in range(30):
                conn.mget(hot)
            for i in range(300):
                conn.set(b"k:%04d" % i, VALUE)
            assert conn.exists(*hot) == 5
            assert evicted(conn) == 305 - conn.dbsize()
    finally:
        server.stop()


def test_allkeys_random_evicts_from_every_database(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", str(BUDGET), "--maxmemory-policy", "allkeys-random")
    try:
        with server.client(db=3) as three, server.client() as zero:
            for i in range(60):
                three.set(b"k:%04d" % i, VALUE)
            for i in range(200):
                assert zero.set(b"k:%04d" % i, VALUE) is True
            assert three.dbsize() < 60
            assert evicted(zero) == 260 - three.dbsize() - zero.dbsize()
    finally:
        server.stop()


def test_config_set_changes_the_budget_and_the_policy_at_run_time(lru_server: ServerProcess) -> None:
    with lru_server.client() as conn:
        for i in range(80):
            conn.set(b"k:%04d" % i, VALUE)
        assert conn.config_get("maxmemory*") == {"maxmemory": str(BUDGET), "maxmemory-policy": "allkeys-lru",
                                                 "maxmemory-samples": "5"}
        assert conn.config_set("maxmemory", str(BUDGET // 2)) is True
        assert conn.dbsize() <= BUDGET // 2 // ENTRY  # evicted at once, not at the next write
        assert evicted(conn) == 80 - conn.dbsize()
        assert conn.info("memory")["maxmemory"] == BUDGET // 2
        assert conn.config_set("maxmemory-policy", "noeviction") is True
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for i in range(100):
                conn.set(b"n:%04d" % i, VALUE)
        assert conn.config_set("maxmemory", "0") is True  # unlimited: everything fits again
        conn.set(b"big", VALUE * 100)
        assert conn.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}


def test_config_set_with_a_bad_value_changes_nothing(lru_server: ServerProcess) -> None:
    with lru_server.client() as conn:
        with pytest.raises(redis.ResponseError) as info:
            conn.config_set("maxmemory-policy", "sometimes")
        assert str(info.value) == (
            "CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of "
            "the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, "
            "allkeys-random, noeviction")  # redis-server 7.0.15's text, byte for byte
        with pytest.raises(redis.ResponseError, match="argument must be a memory value"):
            conn.config_set("maxmemory", "lots")
        with pytest.raises(redis.ResponseError, match="between 1 and 64"):
            conn.config_set("maxmemory-samples", "0")
        with pytest.raises(redis.ResponseError, match="argument must be a memory value"):
            conn.execute_command("CONFIG", "SET", "maxmemory-policy", "noeviction", "maxmemory", "x")
        with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'config|set' command"):
            conn.execute_command("CONFIG", "SET", "maxmemory")
        assert conn.config_get("maxmemory*") == {"maxmemory": str(BUDGET), "maxmemory-policy": "allkeys-lru",
                                                 "maxmemory-samples": "5"}


D = 64


def test_keys_and_v_store_sessions_share_one_budget_each_side_giving_room_first(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", "200000")
    rows = np.ones((100, D), np.float32).tobytes()  # 100 fp16 rows of 64: 12.8 KB per side
    try:
        with server.client() as conn:
            conn.execute_command("KV.PREFIX.REGISTER", "p", D, "fp16")
            conn.execute_command("V.STOREBATCH", "p_pk", 0, 0, rows)
            conn.execute_command("V.STOREBATCH", "p_pv", 0, 0, rows)
            for i in range(300):  # keyspace writes evict keys, the prefix stays
                conn.set(b"k:%04d" % i, VALUE)
            assert conn.execute_command("KV.PREFIX.LOOKUP", "p") == b"HIT"
            assert evicted(conn) > 100
            conn.execute_command("KV.PREFIX.DROP", "p")
            for i in range(300, 400):  # the keyspace alone fills the budget
                conn.set(b"k:%04d" % i, VALUE)
            before, evicted_before = conn.dbsize(), evicted(conn)
            # a V-store write with no other session to evict takes keys by the policy
            conn.execute_command("KV.PREFIX.REGISTER", "q", D, "fp16")
            conn.execute_command("V.STOREBATCH", "q_pk", 0, 0, rows)
            conn.execute_command("V.STOREBATCH", "q_pv", 0, 0, rows)
            assert conn.execute_command("KV.PREFIX.LOOKUP", "q") == b"HIT"
            assert conn.dbsize() < before
            assert evicted(conn) - evicted_before == before - conn.dbsize()
    finally:
        server.stop()
