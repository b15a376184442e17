"""Connection and server commands: PING ECHO HELLO SELECT CLIENT COMMAND INFO CONFIG QUIT FLUSHALL."""

from __future__ import annotations

import socket

import pytest
import redis

from support.procs import ServerProcess


@pytest.fixture
def conn(shared_pion_server: ServerProcess) -> redis.Redis:
    with shared_pion_server.client() as client:
        yield client


@pytest.fixture
def conn3(shared_pion_server: ServerProcess) -> redis.Redis:
    with shared_pion_server.client(protocol=3) as client:
        yield client


def test_ping_and_echo_answer_like_redis(conn: redis.Redis,
                                        shared_pion_server: ServerProcess) -> None:
    assert conn.ping() is True
    with socket.create_connection(("127.0.0.1", shared_pion_server.port), timeout=5) as sock:
        sock.sendall(b"*2\r\n$4\r\nPING\r\n$5\r\nhello\r\n")
        assert sock.recv(100) == b"$5\r\nhello\r\n"
    assert conn.echo(b"\x00bin\r\n") == b"\x00bin\r\n"
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'ping' command"):
        conn.execute_command("PING", "a", "b")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'echo' command"):
        conn.execute_command("ECHO")


def test_unknown_command_uses_redis_wording(conn: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("NOSUCH", "a", "b")
    assert str(info.value) == "unknown command 'NOSUCH', with args beginning with: 'a' 'b' "


def test_command_names_are_case_insensitive(conn: redis.Redis) -> None:
    assert conn.execute_command("pInG") is True
    assert conn.execute_command("echo", "x") == b"x"


def test_hello_3_returns_the_server_map(conn: redis.Redis) -> None:
    reply = conn.execute_command("HELLO", "3")
    fields = dict(zip(reply[0::2], reply[1::2], strict=True)) if isinstance(reply, list) else reply
    assert fields[b"server"] == b"redis"
    assert fields[b"proto"] == 3
    assert fields[b"mode"] == b"standalone"
    assert fields[b"role"] == b"master"
    assert fields[b"modules"] == []
    assert isinstance(fields[b"id"], int)


def test_hello_with_bad_protocol_is_refused(conn: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="unsupported protocol version"):
        conn.execute_command("HELLO", "4")
    with pytest.raises(redis.ResponseError, match="Protocol version is not an integer"):
        conn.execute_command("HELLO", "x")
    with pytest.raises(redis.ResponseError, match="Syntax error in HELLO option 'BOGUS'"):
        conn.execute_command("HELLO", "3", "BOGUS")


def test_hello_setname_names_the_connection(conn3: redis.Redis) -> None:
    conn3.execute_command("HELLO", "3", "SETNAME", "worker-7")
    assert conn3.client_getname() == b"worker-7"


def test_select_accepts_the_sixteen_databases_and_refuses_others(conn: redis.Redis) -> None:
    assert conn.select(0) is True
    assert conn.select(15) is True
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        conn.select(16)
    with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
        conn.execute_command("SELECT", "zero")


def test_client_subcommands_name_the_connection_and_list_it(conn: redis.Redis) -> None:
    client_id = conn.client_id()
    assert conn.client_setname("lmcache-conn") is True
    assert conn.client_getname() == "lmcache-conn"
    assert conn.execute_command("CLIENT", "SETINFO", "LIB-NAME", "lmcache") == b"OK"
    assert conn.execute_command("CLIENT", "SETINFO", "LIB-VER", "0.3") == b"OK"
    mine = [c for c in conn.client_list() if int(c["id"]) == client_id]
    assert len(mine) == 1
    assert mine[0]["name"] == "lmcache-conn"
    assert mine[0]["lib-name"] == "lmcache"
    assert mine[0]["lib-ver"] == "0.3"
    with pytest.raises(redis.ResponseError, match="Client names cannot contain spaces"):
        conn.client_setname("has space")
    with pytest.raises(redis.ResponseError, match="unknown subcommand 'FROB'. Try CLIENT HELP."):
        conn.execute_command("CLIENT", "FROB")
    with pytest.raises(redis.ResponseError, match="Unrecognized option 'COLOR'"):
        conn.execute_command("CLIENT", "SETINFO", "COLOR", "red")


def test_command_count_info_and_docs_describe_the_table(
        conn: redis.Redis, shared_pion_server: ServerProcess) -> None:
    port = shared_pion_server.port
    count = conn.command_count()
    assert count >= 25
    info = conn.execute_command("COMMAND", "INFO", "get")
    assert info["get"]["arity"] == 2
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"COMMAND DOCS set\r\n")
        assert sock.recv(1 << 16).startswith(b"*2\r\n$3\r\nset\r\n*8\r\n$7\r\nsummary\r\n")
    assert len(conn.command()) == count


def test_info_has_the_standard_sections(conn: redis.Redis,
                                        shared_pion_server: ServerProcess) -> None:
    port = shared_pion_server.port
    everything = conn.info("everything")
    for field in ("redis_version", "connected_clients", "used_memory", "maxmemory",
                  "uptime_in_seconds"):
        assert field in everything
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"INFO\r\n")
        text = sock.recv(1 << 16).decode()
    for header in ("# Server", "# Clients", "# Memory", "# Pion", "# Persistence"):
        assert header in text
    only_clients = conn.info("clients")
    assert "connected_clients" in only_clients
    assert "redis_version" not in only_clients


def test_info_memory_names_the_key_policy_and_the_session_lru_that_max_sessions_applies(
        conn: redis.Redis) -> None:
    memory = conn.info("memory")
    assert (memory["maxmemory_policy"], memory["pion_session_eviction"]) == ("allkeys-lru", "lru-sessions")


def test_maxmemory_policy_is_noeviction_only_without_any_bound() -> None:
    from pion.server.commands.admin import maxmemory_policy
    assert maxmemory_policy(0, 256) == "lru-sessions"
    assert maxmemory_policy(8 * 1024**3, 0) == "lru-sessions"
    assert maxmemory_policy(0, 0) == "noeviction"


def test_info_over_resp3_is_a_verbatim_string(conn3: redis.Redis) -> None:
    assert conn3.info("server")["redis_mode"] == "standalone"


def test_config_get_reports_the_effective_configuration(conn: redis.Redis) -> None:
    got = conn.config_get("maxmemory")
    assert got == {"maxmemory": "0"}
    assert conn.config_get("append*") == {"appendonly": "yes", "appendfsync": "everysec"}
    with pytest.raises(redis.ResponseError) as info:
        conn.config_set("port", "1")
    assert str(info.value) == "CONFIG SET failed (possibly related to argument 'port') - can't set immutable config"
    with pytest.raises(redis.ResponseError) as info:
        conn.config_set("foo", "1")
    assert str(info.value) == "Unknown option or number of arguments for CONFIG SET - 'foo'"


def test_dbsize_counts_keys_and_flushall_removes_them(pion_server: ServerProcess) -> None:
    with pion_server.client() as conn:
        conn.mset({"f:a": 1, "f:b": 2})
        assert conn.dbsize() == 2
        assert conn.flushall() is True
        assert conn.dbsize() == 0
        with pytest.raises(redis.ResponseError, match="syntax error"):
            conn.execute_command("FLUSHALL", "LATER")


def test_quit_replies_ok_then_closes(shared_pion_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", shared_pion_server.port), timeout=5) as sock:
        sock.sendall(b"*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n")
        data = b""
        while chunk := sock.recv(100):
            data += chunk
    assert data == b"+OK\r\n"


def test_arity_errors_use_redis_wording_for_every_fixed_arity_command(
        conn: redis.Redis) -> None:
    for name, entry in conn.command().items():
        arity = entry["arity"]
        if arity in (1, -1):
            continue
        too_few = max(0, (arity if arity > 0 else -arity) - 2)
        with pytest.raises(redis.ResponseError) as info:
            conn.execute_command(name, *["x"] * too_few)
        assert str(info.value) == f"wrong number of arguments for '{name}' command"
