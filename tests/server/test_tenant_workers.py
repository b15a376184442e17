"""Tenants under ``pion-server -w 2`` (shared mode): a tenant on worker 1 sees the same data as
under ``-w 1`` although worker 0 answers its keyspace commands and every worker its own sessions.

The forwarded commands and the fanned-out listings travel over links that log in as the
connection's own user (workers/runtime.py ``link_auth``), so worker 0 filters KEYS/SCAN/DBSIZE by
the tenant's prefix, V.LIST/PION.STATS ALL/KV.PREFIX.INFO sum only the tenant's own, and a foreign
key answers -NOPERM on whichever worker the connection is. Runs with no ``--requirepass`` (no
admin login exists), which is the case an admin link could not serve at all.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
import redis

from support.procs import start_server
from support.replies import err
from support.workers import WorkerGroup, start_workers, wait_for_workers, worker_info

TENANTS = {"alice": ("pa", "a|"), "bob": ("pb", "b|")}
D = 4
ROWS = struct.pack("<8f", *range(8))  # two kv_dim=4 f32 rows


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGroup]:
    args = [arg for name, (pw, prefix) in TENANTS.items() for arg in ("--tenant", f"{name}:{pw}:{prefix}")]
    server = start_server(tmp_path_factory.mktemp("tw2"), "-w", "2", "--worker-port-base", "0", *args)
    try:
        with redis.Redis(host="127.0.0.1", port=server.port, username="alice", password=TENANTS["alice"][0],
                         socket_timeout=10) as conn:
            addresses = worker_info(conn)["addresses"]
        assert isinstance(addresses, list)
        started = WorkerGroup(server, [int(str(a).rsplit(":", 1)[1]) for a in addresses])
        wait_for_workers(started)
        seed(started)
        yield started
    finally:
        server.stop()


def as_user(group: WorkerGroup, user: str, worker: int, protocol: int = 2) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=group.ports[worker], username=user,
                       password=TENANTS[user][0], protocol=protocol, socket_timeout=10)


def seed(group: WorkerGroup) -> None:
    """Each tenant: two keys and a hash (worker 0's keyspace), a session on each worker and a
    complete prefix on worker ``i`` for tenant ``i``, and lookups counted on both workers."""
    for index, (user, (_, p)) in enumerate(TENANTS.items()):
        for worker in (0, 1):
            with as_user(group, user, worker) as conn:
                assert conn.set(f"{p}k{worker}", "v") is True
                assert conn.execute_command("V.CREATE", f"{p}s{worker}", D) == b"OK"
        with as_user(group, user, index) as conn:
            assert conn.hset(f"{p}h", "f", "v") == 1
            pipe = conn.pipeline(transaction=False)
            pipe.execute_command("KV.PREFIX.REGISTER", f"{p}ns", D, "fp32")
            pipe.execute_command("V.STOREBATCH", f"{p}ns_pk", 0, 0, ROWS)
            pipe.execute_command("V.STOREBATCH", f"{p}ns_pv", 0, 0, ROWS)
            assert pipe.execute() == [b"OK", 2, 2]
    # Lookups: alice 1 hit (on worker 1, her prefix lives on worker 0); bob 2 misses, 1 hit.
    with as_user(group, "alice", 1) as alice, as_user(group, "bob", 0) as bob:
        assert alice.execute_command("KV.PREFIX.LOOKUP", "a|ns") == b"HIT"
        assert [bob.execute_command("KV.PREFIX.LOOKUP", ns) for ns in ("b|x", "b|y", "b|ns")] == [
            b"MISS", b"MISS", b"HIT"]


def scan_all(conn: redis.Redis) -> list[bytes]:
    return sorted(conn.scan_iter(count=3))


def stats(reply: list[object]) -> dict[str, object]:
    return {key.decode(): value for key, value in zip(reply[::2], reply[1::2], strict=True)}  # type: ignore[union-attr]


def info_fields(text: bytes) -> dict[str, str]:
    return dict(line.split(":", 1) for line in text.decode().splitlines())


@pytest.mark.parametrize("worker", [0, 1])
def test_keys_scan_and_dbsize_show_a_tenant_only_its_own_keys_on_either_worker(
        group: WorkerGroup, worker: int) -> None:
    with as_user(group, "alice", worker) as alice:
        assert sorted(alice.keys("*")) == [b"a|h", b"a|k0", b"a|k1"]
        assert scan_all(alice) == [b"a|h", b"a|k0", b"a|k1"]
        assert alice.dbsize() == 3


def test_v_list_on_worker_1_lists_the_tenants_sessions_of_both_workers_only(group: WorkerGroup) -> None:
    with as_user(group, "alice", 1) as alice, as_user(group, "bob", 1) as bob:
        assert alice.execute_command("V.LIST") == [b"a|ns_pk", b"a|ns_pv", b"a|s0", b"a|s1"]
        assert bob.execute_command("V.LIST") == [b"b|ns_pk", b"b|ns_pv", b"b|s0", b"b|s1"]


def test_kv_prefix_info_cluster_totals_count_only_the_tenants_prefixes(group: WorkerGroup) -> None:
    with as_user(group, "alice", 1) as alice:
        fields = info_fields(alice.execute_command("KV.PREFIX.INFO"))
    assert {k: fields[k] for k in ("registered_prefixes", "worker_id", "workers",
                                   "cluster_registered_prefixes", "cluster_total_prefix_tokens")} == {
        "registered_prefixes": "0", "worker_id": "1", "workers": "2",
        "cluster_registered_prefixes": "1", "cluster_total_prefix_tokens": "2"}


def test_pion_stats_all_sums_only_the_tenants_own_receipts(group: WorkerGroup) -> None:
    with as_user(group, "alice", 1) as alice, as_user(group, "bob", 1) as bob:
        mine = stats(alice.execute_command("PION.STATS", "ALL"))
        theirs = stats(bob.execute_command("PION.STATS", "ALL"))
    assert (mine["kvprefix_hits"], mine["kvprefix_misses"]) == (1, 0)
    assert (theirs["kvprefix_hits"], theirs["kvprefix_misses"]) == (1, 2)


def test_a_foreign_key_is_refused_on_worker_1_and_nothing_changes(group: WorkerGroup) -> None:
    with as_user(group, "alice", 1) as alice, as_user(group, "bob", 0) as bob:
        for call in (("GET", "b|k0"), ("SET", "b|k0", "stolen"), ("DEL", "b|k1"), ("V.FETCH", "b|s0", 0, "RANGE", 0, 1),
                     ("V.DROP", "b|s1"), ("KV.PREFIX.DROP", "a|ns", "b|ns"), ("MSET", "a|z", "1", "b|z", "2")):
            assert err(alice, *call) == "No permissions to access a key"
        assert (bob.get("b|k0"), bob.exists("b|k1", "b|z"), alice.exists("a|z")) == (b"v", 1, 0)
        assert bob.execute_command("V.LIST") == [b"b|ns_pk", b"b|ns_pv", b"b|s0", b"b|s1"]
        assert bob.execute_command("KV.PREFIX.LOOKUP", "b|ns") == b"HIT"


def test_a_resp3_tenant_connection_is_forwarded_as_that_tenant(group: WorkerGroup) -> None:
    with as_user(group, "bob", 1, protocol=3) as bob:
        assert bob.execute_command("ACL", "WHOAMI") == b"bob"
        assert sorted(bob.keys("*")) == [b"b|h", b"b|k0", b"b|k1"]
        assert bob.hgetall("b|h") == {b"f": b"v"}


def test_tenants_without_an_admin_password_still_need_auth_on_every_worker(group: WorkerGroup) -> None:
    replies = []
    for port in (group.server.port, *group.ports):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as anonymous:
            anonymous.sendall(b"*2\r\n$3\r\nGET\r\n$4\r\na|k0\r\n")
            replies.append(anonymous.recv(100))
    assert replies == [b"-NOAUTH Authentication required.\r\n"] * 3


def test_ns_prefix_confines_the_default_user_across_workers(tmp_path_factory: pytest.TempPathFactory) -> None:
    started = start_workers(tmp_path_factory.mktemp("nsw2"), 2, "--ns-prefix", "a|")
    try:
        with started.worker(1) as w1, started.worker(0) as w0:
            assert w1.set("a|x", "1") is True
            assert w0.get("a|x") == b"1"
            assert err(w1, "SET", "b|x", "1") == "No permissions to access a key"
            assert (w1.keys("*"), w1.dbsize()) == ([b"a|x"], 1)
    finally:
        started.server.stop()
