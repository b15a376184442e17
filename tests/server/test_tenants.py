"""Tenants (--tenant, --ns-prefix) through a real pion-server and redis-py: AUTH and HELLO with a
username, ACL WHOAMI, -NOPERM on another prefix's data, filtered listings, per-tenant PION.STATS,
and the configuration errors. The per-command matrix is test_tenant_matrix.py."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pion.common.errors import ConfigError
from pion.server.config import load_config
from pion.server.tenants import TenantSpec
from support.procs import ServerProcess, start_server
from support.replies import err, stats

ADMIN = "adm1n"
ROW = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
NOPERM_KEY = "No permissions to access a key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("tenants"), "--tenant", "alice:pa:a|",
                        "--tenant", "bob:pb:b|", password=ADMIN)
    try:
        yield proc
    finally:
        proc.stop()


def as_user(server: ServerProcess, user: str, password: str, protocol: int = 2) -> redis.Redis:
    return redis.Redis(port=server.port, username=user, password=password, protocol=protocol)


@pytest.fixture
def clean(server: ServerProcess) -> Iterator[tuple[redis.Redis, redis.Redis, redis.Redis]]:
    admin, alice, bob = server.client(), as_user(server, "alice", "pa"), as_user(server, "bob", "pb", 3)
    admin.flushall()
    try:
        yield admin, alice, bob
    finally:
        for conn in (admin, alice, bob):
            conn.close()


def test_auth_and_hello_with_a_username_make_acl_whoami_name_the_tenant(server: ServerProcess) -> None:
    with as_user(server, "alice", "pa") as resp2, as_user(server, "bob", "pb", protocol=3) as resp3:
        assert resp2.execute_command("ACL", "WHOAMI") == b"alice"
        assert resp3.execute_command("ACL", "WHOAMI") == b"bob"
    with server.client() as admin:
        assert admin.execute_command("ACL", "WHOAMI") == b"default"


def test_wrong_tenant_password_and_unknown_user_answer_wrongpass(server: ServerProcess) -> None:
    wrongpass = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        for line in (b"AUTH alice pb", b"AUTH carol pa", b"AUTH default pa", b"HELLO 3 AUTH alice pb"):
            sock.sendall(line + b"\r\n")
            assert sock.recv(1000) == wrongpass
        sock.sendall(b"GET a|k\r\n")
        assert sock.recv(1000) == b"-NOAUTH Authentication required.\r\n"


def test_tenant_reads_and_writes_its_own_prefix(clean: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    _, alice, _ = clean
    assert alice.set("a|k", "v") is True
    assert alice.get("a|k") == b"v"
    assert alice.execute_command("KV.PREFIX.REGISTER", "a|ns", "4", "fp16") == b"OK"
    assert alice.execute_command("V.STOREBATCH", "a|ns_pk", "0", "0", ROW) == 1
    assert alice.execute_command("KV.PREFIX.LOOKUP", "a|ns") == b"HIT"


def test_a_call_naming_one_foreign_key_is_refused_whole_and_changes_nothing(
        clean: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    admin, alice, bob = clean
    bob.set("b|k", "bob's")
    assert err(alice, "MSET", "a|x", "1", "b|k", "2") == NOPERM_KEY
    assert err(alice, "DEL", "a|x", "b|k") == NOPERM_KEY
    assert err(alice, "KV.PREFIX.DROP", "a|ns", "b|ns") == NOPERM_KEY
    assert admin.mget("a|x", "b|k") == [None, b"bob's"]


def test_noperm_is_redis_py_no_permission_error(clean: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    _, alice, _ = clean
    with pytest.raises(redis.exceptions.NoPermissionError) as exc:
        alice.get("b|k")
    assert str(exc.value) == NOPERM_KEY
    with pytest.raises(redis.exceptions.NoPermissionError) as exc:
        alice.flushall()
    assert str(exc.value) == "User alice has no permissions to run the 'flushall' command"


def test_listings_show_a_tenant_only_its_own(clean: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    admin, alice, bob = clean
    for i in range(30):
        alice.set(f"a|k{i}", i)
        bob.set(f"b|k{i}", i)
    alice.execute_command("V.CREATE", "a|s", "4")
    bob.execute_command("V.CREATE", "b|s", "4")
    alice.execute_command("KV.PREFIX.REGISTER", "a|ns", "4", "fp16")
    alice.execute_command("V.STOREBATCH", "a|ns_pk", "0", "0", ROW)
    assert sorted(alice.keys("*")) == sorted(f"a|k{i}".encode() for i in range(30))
    assert sorted(alice.scan_iter(count=7)) == sorted(f"a|k{i}".encode() for i in range(30))
    assert alice.dbsize() == 30
    assert admin.dbsize() == 60
    assert alice.execute_command("V.LIST") == [b"a|ns_pk", b"a|ns_pv", b"a|s"]
    assert bob.execute_command("V.LIST") == [b"b|s"]
    info = dict(line.split(":") for line in alice.execute_command("KV.PREFIX.INFO").decode().split())
    assert {k: info[k] for k in ("registered_prefixes", "total_prefix_tokens", "vstore_sessions")} == {
        "registered_prefixes": "1", "total_prefix_tokens": "1", "vstore_sessions": "3"}
    bob_info = dict(line.split(":") for line in bob.execute_command("KV.PREFIX.INFO").decode().split())
    assert (bob_info["registered_prefixes"], bob_info["vstore_sessions"]) == ("0", "1")


def test_pion_stats_is_per_tenant_and_the_admin_sees_the_sum(
        clean: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    admin, alice, bob = clean
    for conn in (admin, alice, bob):
        conn.execute_command("PION.STATS", "RESET")
    alice.execute_command("KV.PREFIX.LOOKUP", "a|nothing")
    alice.execute_command("KV.PREFIX.LOOKUP", "a|nothing")
    bob.execute_command("KV.PREFIX.LOOKUP", "b|nothing")
    assert (stats(alice)["kvprefix_misses"], stats(bob)["kvprefix_misses"], stats(admin)["kvprefix_misses"]) == (
        2, 1, 3)
    assert alice.execute_command("PION.STATS", "RESET") == b"OK"
    assert (stats(alice)["kvprefix_misses"], stats(bob)["kvprefix_misses"], stats(admin)["kvprefix_misses"]) == (
        0, 1, 3)


def test_acl_users_and_client_list_are_the_admins(clean: tuple[redis.Redis, redis.Redis, redis.Redis]) -> None:
    admin, alice, _ = clean
    assert admin.execute_command("ACL", "USERS") == [b"default", b"alice", b"bob"]
    assert err(alice, "ACL", "USERS") == "User alice has no permissions to run the 'acl|users' command"
    assert err(alice, "CLIENT", "LIST") == "User alice has no permissions to run the 'client|list' command"
    alice_id = alice.client_id()
    line = [c for c in admin.client_list() if int(c["id"]) == alice_id]
    assert [c["user"] for c in line] == ["alice"]


def test_tenants_without_requirepass_still_require_auth(tmp_path: Path) -> None:
    proc = start_server(tmp_path, "--tenant", "alice:pa:a|")
    try:
        with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as sock:
            sock.sendall(b"GET a|k\r\n")
            assert sock.recv(1000) == b"-NOAUTH Authentication required.\r\n"
            sock.sendall(b"AUTH default anything\r\n")  # the admin has no password: no login
            assert sock.recv(1000) == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        with as_user(proc, "alice", "pa") as alice:
            assert alice.set("a|k", "v") is True
    finally:
        proc.stop()


def test_ns_prefix_confines_the_default_user_with_or_without_a_password(tmp_path: Path) -> None:
    for password in (None, "pw"):
        proc = start_server(tmp_path / str(password), "--ns-prefix", "app|", password=password)
        try:
            with proc.client() as conn:
                assert conn.execute_command("ACL", "WHOAMI") == b"default"
                assert conn.set("app|k", "v") is True
                assert err(conn, "GET", "other|k") == NOPERM_KEY
                assert err(conn, "FLUSHALL") == "User default has no permissions to run the 'flushall' command"
                assert conn.keys("*") == [b"app|k"]
        finally:
            proc.stop()


def test_tenant_specs_parse_from_repeated_flags_and_from_the_environment() -> None:
    expected = (TenantSpec("alice", "pa", "acme:"), TenantSpec("bob", "pb", "beta:x:"))
    assert load_config(["--tenant", "alice:pa:acme:", "--tenant", "bob:pb:beta:x:"]).tenants == expected
    assert load_config([], env={"PION_TENANTS": "alice:pa:acme: bob:pb:beta:x:"}).tenants == expected


@pytest.mark.parametrize(("value", "message"), [
    ("alice:pa", "--tenant: expected <name>:<password>:<ns-prefix> with all three non-empty, got 'alice':..."),
    ("alice::a|", "--tenant: expected <name>:<password>:<ns-prefix> with all three non-empty, got 'alice':..."),
    ("default:pw:a|", "--tenant: 'default' is the admin user (--requirepass), not a tenant"),
    ("a:1:x| a:2:y|", "--tenant: tenant 'a' is declared twice"),
    ("a:1:acme b:2:acme-eu", "--tenant: the prefixes of tenants 'a' ('acme') and 'b' ('acme-eu') overlap: "
                             "one could read the other's data"),
])
def test_bad_tenant_specs_are_refused_naming_the_problem(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config([arg for item in value.split() for arg in ("--tenant", item)])
    assert str(exc.value) == message
