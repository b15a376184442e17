"""--requirepass: NOAUTH gate, AUTH <pw>, AUTH default <pw>, HELLO 3 AUTH, WRONGPASS wording."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import redis

from support.procs import ServerProcess, start_server

PASSWORD = "s3cret"
WRONGPASS = "invalid username-password pair or user is disabled."


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("auth"), password=PASSWORD)
    try:
        yield server
    finally:
        server.stop()


def exchange(sock: socket.socket, line: bytes) -> bytes:
    sock.sendall(line + b"\r\n")
    reply = b""
    while not reply.endswith(b"\r\n"):
        reply += sock.recv(1000)
    return reply


def test_commands_before_auth_answer_noauth(locked_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", locked_server.port), timeout=5) as sock:
        sock.sendall(b"GET k\r\nSET k v\r\nPING\r\n")
        reply = b""
        while reply.count(b"\r\n") < 3:
            reply += sock.recv(1000)
    assert reply == b"-NOAUTH Authentication required.\r\n" * 3


def test_wrong_password_answers_wrongpass_and_stays_locked(locked_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", locked_server.port), timeout=5) as sock:
        wrong = b"-WRONGPASS " + WRONGPASS.encode() + b"\r\n"
        assert exchange(sock, b"AUTH nope") == wrong
        assert exchange(sock, b"AUTH someone " + PASSWORD.encode()) == wrong
        assert exchange(sock, b"AUTH default nope") == wrong
        assert exchange(sock, b"GET k") == b"-NOAUTH Authentication required.\r\n"


def test_auth_with_password_and_with_default_user(locked_server: ServerProcess) -> None:
    for line in (b"AUTH " + PASSWORD.encode(), b"AUTH default " + PASSWORD.encode()):
        with socket.create_connection(("127.0.0.1", locked_server.port), timeout=5) as sock:
            assert exchange(sock, line) == b"+OK\r\n"
            assert exchange(sock, b"SET authed yes") == b"+OK\r\n"
            assert exchange(sock, b"GET authed") == b"$3\r\nyes\r\n"


def test_redis_py_with_password_connects_over_resp2_and_resp3(
        locked_server: ServerProcess) -> None:
    for protocol in (2, 3):
        with locked_server.client(protocol=protocol) as conn:
            assert conn.ping() is True
            assert conn.set(f"p{protocol}", "v") is True


def test_hello_without_auth_is_refused_and_hello_auth_logs_in(
        locked_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", locked_server.port), timeout=5) as sock:
        sock.sendall(b"HELLO 3\r\n")
        assert sock.recv(1000).startswith(b"-NOAUTH HELLO must be called with the client "
                                          b"already authenticated")
        sock.sendall(b"HELLO 3 AUTH default wrong\r\n")
        assert sock.recv(1000) == b"-WRONGPASS " + WRONGPASS.encode() + b"\r\n"
        sock.sendall(b"HELLO 3 AUTH default " + PASSWORD.encode() + b"\r\n")
        assert sock.recv(1000).startswith(b"%8\r\n")
        sock.sendall(b"GET missing\r\n")
        assert sock.recv(1000) == b"_\r\n"


def test_quit_is_allowed_before_auth(locked_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", locked_server.port), timeout=5) as sock:
        sock.sendall(b"QUIT\r\n")
        assert sock.recv(100) == b"+OK\r\n"


def test_auth_without_configured_password_is_an_error(shared_pion_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", shared_pion_server.port), timeout=5) as sock:
        assert exchange(sock, b"AUTH anything").startswith(
            b"-ERR AUTH <password> called without any password configured")
        assert exchange(sock, b"AUTH default anything") == b"+OK\r\n"
