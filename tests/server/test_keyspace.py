"""The binary-safe keyspace: SET options, multi-key commands, expiry, KEYS/SCAN, LMCache's pattern."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from pion.server.store.glob import compile_glob
from pion.server.store.keyspace import Keyspace
from pion.server.store.records import KeyExpire, KeysDel, KeySet, KeysFlush, Record
from support.procs import ServerProcess

MB = 1024 * 1024


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def conn(request: pytest.FixtureRequest, shared_pion_server: ServerProcess) -> Iterator[redis.Redis]:
    with shared_pion_server.client(protocol=request.param) as client:
        client.flushall()
        yield client


# ---- unit: glob and the Keyspace class ----------------------------------------------------------
@pytest.mark.parametrize(("pattern", "key", "matches"), [
    (b"*", b"anything", True),
    (b"h?llo", b"hello", True),
    (b"h?llo", b"hllo", False),
    (b"h[ae]llo", b"hallo", True),
    (b"h[^e]llo", b"hello", False),
    (b"h[a-b]llo", b"hbllo", True),
    (b"h\\*llo", b"h*llo", True),
    (b"h\\*llo", b"hello", False),
    (b"bin\xff*", b"bin\xff\x00\n", True),
])
def test_glob_follows_redis_rules_on_raw_bytes(pattern: bytes, key: bytes, matches: bool) -> None:
    assert compile_glob(pattern).match(key) == matches


def test_keyspace_tracks_used_bytes_through_every_mutation() -> None:
    ks = Keyspace()
    ks.set(b"k", b"x" * 100)
    first = ks.used_bytes
    ks.set(b"k", b"x" * 10)
    assert ks.used_bytes == first - 90
    ks.delete([b"k"])
    assert ks.used_bytes == 0


def test_keyspace_journals_each_mutation_before_applying_it() -> None:
    records: list[Record] = []

    class Recorder:
        durable = False

        def append(self, record: Record) -> None:
            records.append(record)

    ks = Keyspace(journal=Recorder())
    ks.set(b"a", b"1", expire_at_ms=10**13)
    ks.expire(b"a", None)
    ks.delete([b"a", b"missing"])
    ks.flush()
    assert records == [KeySet(b"a", b"1", 10**13), KeyExpire(b"a", None), KeysDel([b"a"]), KeysFlush()]


def test_scan_cursor_survives_deletions_during_iteration() -> None:
    ks = Keyspace()
    for i in range(100):
        ks.set(b"k%d" % i, b"v")
    seen: list[bytes] = []
    cursor = 0
    while True:
        cursor, keys = ks.scan(cursor, 7)
        seen += keys
        ks.delete([b"k%d" % (i * 3) for i in range(5)])  # churn between calls
        if cursor == 0:
            break
    survivors = {b"k%d" % i for i in range(100)} - {b"k%d" % (i * 3) for i in range(5)}
    assert survivors <= set(seen)
    assert len(seen) == len(set(seen))


# ---- SET and its options --------------------------------------------------------------------
def test_set_get_is_binary_safe(conn: redis.Redis) -> None:
    key, value = b"\x00k\r\n\xff", bytes(range(256))
    assert conn.set(key, value) is True
    assert conn.get(key) == value


def test_set_nx_xx_and_get_options_behave_like_redis(conn: redis.Redis) -> None:
    assert conn.set("s", "1", nx=True) is True
    assert conn.set("s", "2", nx=True) is None
    assert conn.set("missing", "2", xx=True) is None
    assert conn.exists("missing") == 0
    assert conn.set("s", "3", xx=True) is True
    assert conn.set("s", "4", get=True) == b"3"
    assert conn.set("fresh", "1", get=True) is None
    assert conn.set("s", "5", nx=True, get=True) == b"4"
    assert conn.get("s") == b"4"


@pytest.mark.parametrize(("args", "message"), [
    (["NX", "XX"], "syntax error"),
    (["EX", "10", "PX", "100"], "syntax error"),
    (["EX"], "syntax error"),
    (["EX", "ten"], "value is not an integer or out of range"),
    (["EX", "0"], "invalid expire time in 'set' command"),
    (["PX", "-5"], "invalid expire time in 'set' command"),
    (["KEEPTTL", "EX", "5"], "syntax error"),
    (["BOGUS"], "syntax error"),
])
def test_set_option_errors_record_nothing(conn: redis.Redis, args: list[str],
                                          message: str) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("SET", "bad", "v", *args)
    assert str(info.value) == message
    assert conn.exists("bad") == 0


def test_set_with_expiry_sets_a_ttl_that_keepttl_keeps_and_a_plain_set_clears(conn: redis.Redis) -> None:
    conn.set("t", "v", ex=100)
    assert 99 <= conn.ttl("t") <= 100
    conn.set("t", "w", keepttl=True)
    assert 99 <= conn.ttl("t") <= 100
    conn.set("t", "x")
    assert conn.ttl("t") == -1
    conn.set("t", "y", px=50_000)
    assert 49_000 < conn.pttl("t") <= 50_000
    conn.set("t", "z", exat=int(time.time()) + 60)
    assert 58 <= conn.ttl("t") <= 60


# ---- multi-key commands ----------------------------------------------------------------------
def test_mset_mget_exists_del_and_unlink_behave_like_redis(conn: redis.Redis) -> None:
    assert conn.mset({"a": "1", "b": "2", "c": "3"}) is True
    assert conn.mget(["a", "nope", "c"]) == [b"1", None, b"3"]
    assert conn.exists("a", "a", "nope", "b") == 3
    assert conn.delete("a", "nope") == 1
    assert conn.unlink("b", "c", "c") == 2
    assert conn.dbsize() == 0
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'mset' command"):
        conn.execute_command("MSET", "a", "1", "b")
    assert conn.exists("a") == 0


# ---- expiry --------------------------------------------------------------------------------
def test_ttl_reports_expiry_and_an_expired_key_vanishes_when_read(conn: redis.Redis) -> None:
    conn.set("e", "v")
    assert conn.ttl("e") == -1
    assert conn.ttl("absent") == -2
    assert conn.pttl("absent") == -2
    assert conn.expire("absent", 10) is False
    assert conn.pexpire("e", 150) is True
    assert 0 < conn.pttl("e") <= 150
    time.sleep(0.25)
    assert conn.get("e") is None
    assert conn.exists("e") == 0


def test_expire_honours_nx_xx_gt_lt_and_a_negative_ttl_deletes(conn: redis.Redis) -> None:
    conn.set("o", "v")
    assert conn.expire("o", 100, xx=True) is False
    assert conn.expire("o", 100, nx=True) is True
    assert conn.expire("o", 50, gt=True) is False
    assert conn.expire("o", 200, gt=True) is True
    assert conn.expire("o", 10, lt=True) is True
    with pytest.raises(redis.ResponseError, match="not compatible"):
        conn.execute_command("EXPIRE", "o", "10", "NX", "XX")
    with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
        conn.execute_command("EXPIRE", "o", "soon")
    assert conn.expire("o", -1) is True
    assert conn.exists("o") == 0


def test_active_expiry_removes_keys_nobody_reads(conn: redis.Redis) -> None:
    conn.mset({f"gone:{i}": "v" for i in range(50)})
    for i in range(50):
        conn.pexpire(f"gone:{i}", 50)
    conn.set("stays", "v")
    deadline = time.monotonic() + 5
    while conn.dbsize() > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert conn.dbsize() == 1


# ---- KEYS and SCAN ---------------------------------------------------------------------------
def test_keys_and_scan_filter_by_match_and_page_by_count(conn: redis.Redis) -> None:
    conn.mset({f"user:{i}": i for i in range(30)} | {"other": 1})
    assert sorted(conn.keys("user:1*")) == sorted(
        [b"user:1"] + [f"user:{i}".encode() for i in range(10, 20)])
    found = set(conn.scan_iter(match="user:*", count=7))
    assert found == {f"user:{i}".encode() for i in range(30)}
    cursor, keys = conn.scan(0, count=5)
    assert len(keys) == 5
    assert cursor != 0
    with pytest.raises(redis.ResponseError, match="invalid cursor"):
        conn.execute_command("SCAN", "abc")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        conn.execute_command("SCAN", "0", "COUNT", "0")


# ---- LMCache's redis:// access pattern ---------------------------------------------------------
def test_lmcache_access_pattern_works_with_32_megabyte_pairs(shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client(protocol=3) as conn:
        assert conn.execute_command("CLIENT", "SETINFO", "LIB-NAME", "lmcache") == b"OK"
        assert conn.select(0) is True
        chunk = "model@1@0@abcdef"
        kv_bytes = bytes(range(251)) * (32 * MB // 251)
        metadata = b'{"shape": [30, 2, 256, 192], "dtype": "float16", "fmt": "vllm"}'
        assert conn.exists(f"{chunk}kv_bytes") == 0
        assert conn.set(f"{chunk}kv_bytes", kv_bytes) is True
        assert conn.set(f"{chunk}metadata", metadata) is True
        assert conn.exists(f"{chunk}kv_bytes", f"{chunk}metadata") == 2
        assert conn.get(f"{chunk}metadata") == metadata
        assert conn.get(f"{chunk}kv_bytes") == kv_bytes
        assert conn.delete(f"{chunk}kv_bytes", f"{chunk}metadata") == 2
        assert conn.exists(f"{chunk}kv_bytes") == 0
