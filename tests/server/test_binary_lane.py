"""The binary fast lane on port+1 against a real pion-server: the documented worked example byte
for byte, the same answers as RESP, STATUS_COLDMISS, AUTH, bad frames, and turning it off."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from pion.common.binary_frames import (
    CMD_ATTEND_PREFIX_LOOKUP, CMD_ATTEND_PREFIX_QUERY, CMD_ATTEND_PREFIX_QUERY_FUSED, CMD_AUTH, CMD_PING,
    STATUS_COLDMISS, STATUS_ERR, STATUS_NOAUTH, STATUS_OK, encode_request, parse_reply_header,
)
from support.procs import ServerProcess, free_port, start_server


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def call(sock: socket.socket, command: int, fields: list[bytes], request_id: int = 1) -> tuple[int, int, bytes]:
    sock.sendall(b"".join(bytes(p) for p in encode_request(command, request_id, fields)))
    status, reply_id, n = parse_reply_header(read_exact(sock, 12))
    return status, reply_id, read_exact(sock, n)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    port = free_port()
    while True:  # the lane needs port + 1 free too
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
                break
            except OSError:
                port = free_port()
    proc = start_server(tmp_path_factory.mktemp("binary"), port=port)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def r(server: ServerProcess) -> Iterator[redis.Redis]:
    with server.client() as client:
        yield client


def test_info_reports_the_lane_on_port_plus_one(r: redis.Redis, server: ServerProcess) -> None:
    assert r.info("server")["binary_port"] == server.port + 1


def test_the_documented_worked_example_is_byte_exact(r: redis.Redis, server: ServerProcess) -> None:
    k = np.zeros((1, 2, 4), dtype="<f4").tobytes()
    r.execute_command("ATTEND.PREFIX.STORE", "s", 0, 1, 2, 4, k, k)
    request = bytes.fromhex("5eca0121 07000000 02000000 0a000000 01000000 73 01000000 30")
    with connect(server.port + 1) as sock:
        sock.sendall(request)
        assert read_exact(sock, 15) == bytes.fromhex("5eca0100 07000000 03000000 484954")


def test_query_fused_answers_exactly_what_resp_answers(r: redis.Redis, server: ServerProcess) -> None:
    rng = np.random.default_rng(1)
    k, v = (rng.standard_normal((2, 30, 8)).astype("<f4") for _ in range(2))
    q, ks, vs = (rng.standard_normal(shape).astype("<f4") for shape in ((4, 2, 8), (2, 3, 8), (2, 3, 8)))
    r.execute_command("ATTEND.PREFIX.STORE", "bf", 0, 2, 30, 8, k.tobytes(), v.tobytes())
    words = [b"bf", b"0", b"4", b"8", b"3", b"2", q.tobytes(), ks.tobytes(), vs.tobytes(), b""]
    resp = r.execute_command("ATTEND.PREFIX.QUERY_FUSED", *words)
    with connect(server.port + 1) as sock:
        assert call(sock, CMD_ATTEND_PREFIX_QUERY_FUSED, words, 42) == (STATUS_OK, 42, resp)
        plain = [b"bf", b"0", b"4", b"8", b"0", q.tobytes()]
        assert call(sock, CMD_ATTEND_PREFIX_QUERY, plain, 43) == (
            STATUS_OK, 43, r.execute_command("ATTEND.PREFIX.QUERY", *plain))


def test_two_frames_in_one_write_get_two_replies_in_order(r: redis.Redis, server: ServerProcess) -> None:
    with connect(server.port + 1) as sock:
        sock.sendall(b"".join(bytes(p) for p in encode_request(CMD_PING, 5, []) + encode_request(
            CMD_ATTEND_PREFIX_LOOKUP, 6, [b"nothing-here", b"0"])))
        first = parse_reply_header(read_exact(sock, 12))
        assert (first, read_exact(sock, 4)) == ((STATUS_OK, 5, 4), b"PONG")
        second = parse_reply_header(read_exact(sock, 12))
        assert (second, read_exact(sock, 4)) == ((STATUS_OK, 6, 4), b"MISS")


def test_errors_carry_the_resp_text_and_the_connection_stays(server: ServerProcess) -> None:
    with connect(server.port + 1) as sock:
        status, _, body = call(sock, CMD_ATTEND_PREFIX_QUERY, [b"nosuch", b"0", b"1", b"4", b"0", bytes(16)])
        assert (status, body) == (STATUS_ERR, b"ERR session 'nosuch' layer 0 not found (ATTEND.PREFIX.STORE it first)")
        assert call(sock, 0x7F, [])[::2] == (STATUS_ERR, b"ERR unknown binary-lane command byte 0x7f")
        assert call(sock, CMD_ATTEND_PREFIX_LOOKUP, [b"x"])[::2] == (
            STATUS_ERR, b"ERR wrong number of arguments for 'attend.prefix.lookup' command")
        assert call(sock, CMD_PING, [])[::2] == (STATUS_OK, b"PONG")


def test_a_demoted_layer_answers_status_coldmiss(tmp_path: Path) -> None:
    proc = start_server(tmp_path / "d", "--binary-port", str(free_port()))
    try:
        with proc.client() as r:
            k = bytes(16)
            for i in range(257):
                r.execute_command("ATTEND.PREFIX.STORE", f"c{i}", 0, 1, 1, 4, k, k)
            lane_port = r.info("server")["binary_port"]
        with connect(lane_port) as sock:
            assert call(sock, CMD_ATTEND_PREFIX_QUERY, [b"c0", b"0", b"1", b"4", b"0", bytes(16)])[::2] == (
                STATUS_COLDMISS, b"COLDMISS c0 0")
    finally:
        proc.stop()


def test_a_foreign_frame_gets_an_error_and_is_disconnected_while_resp_keeps_serving(
        r: redis.Redis, server: ServerProcess) -> None:
    with connect(server.port + 1) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n....")
        status, _, n = parse_reply_header(read_exact(sock, 12))
        assert (status, read_exact(sock, n)[:19]) == (STATUS_ERR, b"ERR Protocol error:")
        assert sock.recv(1) == b""
    assert r.ping() is True


def test_a_password_protected_server_wants_an_auth_frame_first(tmp_path: Path) -> None:
    lane_port = free_port()
    proc = start_server(tmp_path / "d", "--binary-port", str(lane_port), password="s3cret")
    try:
        with connect(lane_port) as sock:
            assert call(sock, CMD_PING, [])[::2] == (STATUS_NOAUTH, b"NOAUTH Authentication required.")
            assert call(sock, CMD_AUTH, [b"wrong"])[::2] == (
                STATUS_ERR, b"WRONGPASS invalid username-password pair or user is disabled.")
            assert call(sock, CMD_AUTH, [b"s3cret"])[::2] == (STATUS_OK, b"OK")
            assert call(sock, CMD_PING, [])[::2] == (STATUS_OK, b"PONG")
    finally:
        proc.stop()


def test_binary_port_zero_turns_the_lane_off(tmp_path: Path) -> None:
    proc = start_server(tmp_path / "d", "--binary-port", "0")
    try:
        with proc.client() as r:
            assert r.info("server")["binary_port"] == 0
    finally:
        proc.stop()


def test_tenants_authenticate_on_the_lane_and_stay_inside_their_prefix(tmp_path: Path) -> None:
    lane_port = free_port()
    proc = start_server(tmp_path / "d", "--binary-port", str(lane_port), "--tenant", "alice:pa:a|")
    try:
        with connect(lane_port) as sock:
            assert call(sock, CMD_PING, [])[::2] == (STATUS_NOAUTH, b"NOAUTH Authentication required.")
            assert call(sock, CMD_AUTH, [b"alice", b"pb"])[::2] == (
                STATUS_ERR, b"WRONGPASS invalid username-password pair or user is disabled.")
            assert call(sock, CMD_AUTH, [b"alice", b"pa"])[::2] == (STATUS_OK, b"OK")
            assert call(sock, CMD_ATTEND_PREFIX_LOOKUP, [b"b|att", b"0"])[::2] == (
                STATUS_ERR, b"NOPERM No permissions to access a key")
            assert call(sock, CMD_ATTEND_PREFIX_LOOKUP, [b"a|att", b"0"])[::2] == (STATUS_OK, b"MISS")
    finally:
        proc.stop()
