"""pion-server -w 2 through real processes: one port, per-worker addresses, the shared directory,
redirects, the keyspace on worker 0, fan-out commands (test_kvprefix_xworker in the original design)."""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from support.replies import err, stats
from support.workers import WorkerGroup, start_workers, worker_info

D = 8
_ids = itertools.count()


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGroup]:
    started = start_workers(tmp_path_factory.mktemp("w2"), 2)
    try:
        yield started
    finally:
        started.server.stop()


def name(tag: str) -> str:
    return f"xw|{tag}|{next(_ids)}"


def rows(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32).tobytes()


def store_prefix(conn: redis.Redis, ns: str, n_tokens: int = 4) -> None:
    pipe = conn.pipeline(transaction=False)
    pipe.execute_command("KV.PREFIX.REGISTER", ns, D, "fp32", "LAYERS", 1, "BLOCKS", 16, 1,
                         struct.pack("<Q", 7))
    pipe.execute_command("V.STOREBATCH", ns + "_pk", 0, 0, rows(n_tokens, 1))
    pipe.execute_command("V.STOREBATCH", ns + "_pv", 0, 0, rows(n_tokens, 2))
    assert pipe.execute() == [b"OK", n_tokens, n_tokens]


def test_each_worker_says_who_it_is_on_its_own_address(group: WorkerGroup) -> None:
    infos = []
    for index in (0, 1):
        with group.worker(index) as conn:
            infos.append(worker_info(conn))
    addresses = [f"127.0.0.1:{p}" for p in group.ports]
    assert [(i["id"], i["workers"], i["mode"], i["address"], i["addresses"]) for i in infos] == [
        (0, 2, "shared", addresses[0], addresses), (1, 2, "shared", addresses[1], addresses)]


def test_connections_to_the_one_port_are_spread_over_both_workers(group: WorkerGroup) -> None:
    seen = set()
    for _ in range(24):
        with group.server.client() as conn:
            seen.add(worker_info(conn)["id"])
    assert seen == {0, 1}


def test_a_key_written_through_one_worker_is_read_through_the_other(group: WorkerGroup) -> None:
    key = name("key")
    with group.worker(1) as w1, group.worker(0) as w0:
        assert w1.set(key, b"\x00\xffvalue", ex=100) is True
        assert w0.get(key) == b"\x00\xffvalue"
        assert w1.get(key) == b"\x00\xffvalue"
        assert (w0.exists(key), w1.exists(key)) == (1, 1)
        assert 0 < w1.ttl(key) <= 100
        assert w1.hset(key + "h", mapping={"a": "1", "b": "2"}) == 2
        assert w0.hgetall(key + "h") == {b"a": b"1", b"b": b"2"}
        assert w1.delete(key, key + "h") == 2
        assert (w0.get(key), w1.exists(key)) == (None, 0)


def test_string_and_database_commands_through_worker_1_act_on_worker_0s_keyspace(group: WorkerGroup) -> None:
    key = name("str")
    with group.worker(1, db=3) as w1, group.worker(0, db=3) as w0, group.worker(0) as w0_db0:
        assert (w1.incrby(key, 5), w1.append(key, "0"), w0.get(key)) == (5, 2, b"50")
        assert (w1.copy(key, key + "c"), w0.get(key + "c")) == (True, b"50")
        assert (w1.move(key, 4), w0.exists(key)) == (True, 0)
        assert w0_db0.exists(key + "c") == 0  # db 3's, not db 0's
        assert (w1.flushdb(), w0.dbsize()) == (True, 0)


def test_forwarded_replies_keep_resp3_types_and_errors(group: WorkerGroup) -> None:
    key = name("r3")
    with group.worker(1, protocol=3) as w1:
        w1.hset(key, mapping={"f": "v"})
        assert w1.execute_command("HGETALL", key) == {b"f": b"v"}  # a RESP3 map, relayed as such
        assert err(w1, "GET", key) == "WRONGTYPE Operation against a key holding the wrong kind of value"
        assert err(w1, "SET", key) == "wrong number of arguments for 'set' command"


def test_lmcache_redis_pattern_works_over_the_one_port(group: WorkerGroup) -> None:
    # LMCache's redis:// backend: SET <key> <kv bytes> and <key>metadata, EXISTS, GET, from a pool
    # whose connections land on either worker.
    pool = redis.ConnectionPool(host="127.0.0.1", port=group.server.port, max_connections=8)
    clients = [redis.Redis(connection_pool=pool) for _ in range(4)]
    held = [pool.get_connection() for _ in range(8)]  # open 8 distinct connections
    for conn in held:
        pool.release(conn)
    keys = [f"lmcache:smollm2:{next(_ids)}:{i}" for i in range(16)]
    for i, key in enumerate(keys):
        clients[i % 4].set(key + "kv_bytes", bytes([i]) * 4096)
        clients[(i + 1) % 4].set(key + "metadata", struct.pack("<4I", i, 1, 2, 3))
    for i, key in enumerate(keys):
        reader = clients[(i + 2) % 4]
        assert reader.exists(key + "kv_bytes", key + "metadata") == 2
        assert reader.get(key + "kv_bytes") == bytes([i]) * 4096
        assert reader.get(key + "metadata") == struct.pack("<4I", i, 1, 2, 3)
    pool.disconnect()


def test_lookup_answers_hit_on_the_worker_that_does_not_hold_the_prefix(group: WorkerGroup) -> None:
    ns = name("lookup")
    with group.worker(0) as w0, group.worker(1) as w1:
        before = stats(w1)
        assert w1.execute_command("KV.PREFIX.LOOKUP", ns) == b"MISS"
        store_prefix(w0, ns, n_tokens=6)
        assert w1.execute_command("KV.PREFIX.LOOKUP", ns, "PREFILL_MS", 30) == b"HIT"
        after = stats(w1)
        assert (after["kvprefix_hits"] - before["kvprefix_hits"],
                after["kvprefix_misses"] - before["kvprefix_misses"],
                after["kvprefix_tokens_served"] - before["kvprefix_tokens_served"]) == (1, 1, 6)


def test_an_incomplete_prefix_is_a_miss_on_every_worker(group: WorkerGroup) -> None:
    ns = name("partial")
    with group.worker(0) as w0, group.worker(1) as w1:
        w0.execute_command("KV.PREFIX.REGISTER", ns, D, "fp32", "LAYERS", 1)
        w0.execute_command("V.STOREBATCH", ns + "_pk", 0, 0, rows(3))
        assert (w0.execute_command("KV.PREFIX.LOOKUP", ns), w1.execute_command("KV.PREFIX.LOOKUP", ns)) == (
            b"MISS", b"MISS")
        w0.execute_command("V.STOREBATCH", ns + "_pv", 0, 0, rows(3))
        assert w1.execute_command("KV.PREFIX.LOOKUP", ns) == b"HIT"


@pytest.mark.parametrize("command", [
    ["V.FETCH", "{ns}_pk", 0, "RANGE", 0, 1],
    ["V.MFETCH", "{ns}_pv", 0, 1, "RANGE", 0, 1],
    ["V.STOREBATCH", "{ns}_pk", 0, 0, b"\x00" * 4 * D],
    ["V.INFO", "{ns}_pk"],
    ["KV.PREFIX.BLOCKS", "{ns}"],
    ["KV.PREFIX.MEMBERSHIP", "{ns}", 1, struct.pack("<Q", 7)],
    ["SSM.PREFIX.FETCH", "{ns}", 0],
    ["KV.PREFIX.REGISTER", "{ns}", D, "fp32"],
    ["V.CREATE", "{ns}_pk", D],
    ["KV.PREFIX.WARM", "{ns}", 2, 4],
    ["ATTEND.PREFIX.LOOKUP", "{ns}", 0],
    ["SSM.PREFIX.STORE", "{ns}", 0, b"state"],
])
def test_session_commands_on_a_non_owner_name_the_owner_and_change_nothing(
        group: WorkerGroup, command: list[object]) -> None:
    ns = name("redirect")
    with group.worker(0) as w0, group.worker(1) as w1:
        store_prefix(w0, ns)
        args = [a.format(ns=ns) if isinstance(a, str) else a for a in command]
        verb = str(command[0])
        assert err(w1, *args) == f"{verb} session lives on worker 0 127.0.0.1:{group.ports[0]}"
        assert w0.execute_command("V.FETCH", ns + "_pk", 0, "RANGE", 0, 4) == rows(4, 1)
        assert w1.execute_command("KV.PREFIX.LOOKUP", ns) == b"HIT"


def test_a_new_namespace_is_placed_on_the_connection_worker(group: WorkerGroup) -> None:
    ns = name("placed")
    with group.worker(1) as w1, group.worker(0) as w0:
        store_prefix(w1, ns)
        assert w1.execute_command("V.FETCH", ns + "_pv", 0, "RANGE", 0, 4) == rows(4, 2)
        assert err(w0, "KV.PREFIX.BLOCKS", ns) == (
            f"KV.PREFIX.BLOCKS session lives on worker 1 127.0.0.1:{group.ports[1]}")


def test_drop_through_any_worker_drops_on_the_owner(group: WorkerGroup) -> None:
    a, b = name("dropa"), name("dropb")
    with group.worker(0) as w0, group.worker(1) as w1:
        store_prefix(w0, a)
        store_prefix(w1, b)
        assert w1.execute_command("KV.PREFIX.DROP", a, b, name("never")) == 2
        assert [w.execute_command("KV.PREFIX.LOOKUP", n) for w in (w0, w1) for n in (a, b)] == [b"MISS"] * 4
        # The names are free again: either worker may now create them.
        assert w1.execute_command("V.CREATE", a + "_pk", D) == b"OK"
        assert w0.execute_command("V.DROP", a + "_pk") == 1


def test_v_list_lists_the_sessions_of_every_worker(group: WorkerGroup) -> None:
    a, b = name("lista"), name("listb")
    with group.worker(0) as w0, group.worker(1) as w1:
        w0.execute_command("V.CREATE", a, D)
        w1.execute_command("V.CREATE", b, D)
        pattern = "xw|list*"
        assert {a.encode(), b.encode()} <= set(w0.execute_command("V.LIST", pattern))
        assert w0.execute_command("V.LIST", pattern) == w1.execute_command("V.LIST", pattern)


def test_pion_stats_all_sums_every_worker_and_plain_stats_stay_per_worker(group: WorkerGroup) -> None:
    with group.worker(0) as w0, group.worker(1) as w1:
        for w in (w0, w1):
            w.execute_command("PION.STATS", "RESET")
        w0.execute_command("KV.PREFIX.LOOKUP", name("m"))
        w1.execute_command("KV.PREFIX.LOOKUP", name("m"))
        w1.execute_command("KV.PREFIX.LOOKUP", name("m"))
        reply = w0.execute_command("PION.STATS", "ALL")
        total = dict(zip(reply[::2], reply[1::2], strict=True))
        assert (total[b"kvprefix_misses"], stats(w0)["kvprefix_misses"], stats(w1)["kvprefix_misses"]) == (3, 1, 2)
        assert err(w0, "PION.STATS", "EVERYTHING") == "syntax error near 'EVERYTHING'"


def test_kv_prefix_info_adds_the_group_totals(group: WorkerGroup) -> None:
    with group.worker(0) as w0, group.worker(1) as w1:
        texts = [w.execute_command("KV.PREFIX.INFO").decode() for w in (w0, w1)]
    fields = [dict(line.split(":", 1) for line in t.split("\r\n") if line) for t in texts]
    assert [(f["worker_id"], f["workers"]) for f in fields] == [("0", "2"), ("1", "2")]
    assert fields[0]["cluster_registered_prefixes"] == fields[1]["cluster_registered_prefixes"]
    assert int(fields[0]["cluster_registered_prefixes"]) == (
        int(fields[0]["registered_prefixes"]) + int(fields[1]["registered_prefixes"]))


def test_a_bad_lookup_on_a_non_owner_is_refused_and_counts_nothing(group: WorkerGroup) -> None:
    ns = name("badlookup")
    with group.worker(0) as w0, group.worker(1) as w1:
        store_prefix(w0, ns)
        before = stats(w1)
        assert err(w1, "KV.PREFIX.LOOKUP", ns, "TOKENS", "many") == "value is not an integer or out of range (TOKENS)"
        assert err(w1, "KV.PREFIX.LOOKUP", ns, "COLOUR", "red") == "syntax error near 'COLOUR'"
        after = stats(w1)
        assert (after["kvprefix_hits"], after["kvprefix_misses"]) == (before["kvprefix_hits"],
                                                                       before["kvprefix_misses"])


def test_save_on_one_worker_snapshots_every_worker(group: WorkerGroup) -> None:
    with group.worker(1) as w1:
        assert w1.execute_command("SAVE") is True
    data_dir: Path = group.server.data_dir
    assert sorted(p.name for p in data_dir.glob("pion.vstore.?")) == ["pion.vstore.0", "pion.vstore.1"]
    assert (data_dir / "pion.workers").read_text() == "2\n"


def test_bgsave_on_one_worker_starts_a_background_save_on_every_worker(group: WorkerGroup) -> None:
    with group.worker(0) as w0, group.worker(1) as w1:
        before = [w.lastsave() for w in (w0, w1)]
        time.sleep(1.1)  # LASTSAVE has one-second resolution
        assert w0.bgsave() is True
        deadline = time.monotonic() + 20
        while [w.lastsave() for w in (w0, w1)] == before or any(
                w.lastsave() == b for w, b in zip((w0, w1), before, strict=True)):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert [w.lastsave() > b for w, b in zip((w0, w1), before, strict=True)] == [True, True]
