"""Wire-level behaviour: RESP2/RESP3 rendering, inline commands, pipelining, limits, errors."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import redis

from pion.server.resp.encoder import encode_to_bytes
from pion.server.resp.inline import InlineError, split_inline
from pion.server.resp.replies import ErrorReply, NullArray, SimpleString, Verbatim
from support.procs import ServerProcess, start_server

MB = 1024 * 1024


def raw_exchange(port: int, payload: bytes, wait_s: float = 0.3) -> bytes:
    """Send bytes on a fresh socket and return everything received until idle or closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        time.sleep(wait_s)
        sock.settimeout(0.5)
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks)


def is_closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(3)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with small limits so they can be hit cheaply."""
    server = start_server(tmp_path_factory.mktemp("limited"), "--proto-max-bulk-len", "1mb",
                          "--client-output-buffer-limit", "4mb", "--maxclients", "3")
    try:
        yield server
    finally:
        server.stop()


# ---- encoder (sans-I/O) ---------------------------------------------------------------------
def test_encoder_renders_maps_as_maps_in_resp3_and_flat_arrays_in_resp2() -> None:
    value = {"a": 1.5, "b": [None, b"x"]}
    assert encode_to_bytes(value, resp3=True) == (
        b"%2\r\n$1\r\na\r\n,1.5\r\n$1\r\nb\r\n*2\r\n_\r\n$1\r\nx\r\n")
    assert encode_to_bytes(value, resp3=False) == (
        b"*4\r\n$1\r\na\r\n$3\r\n1.5\r\n$1\r\nb\r\n*2\r\n$-1\r\n$1\r\nx\r\n")


def test_encoder_renders_every_reply_type() -> None:
    assert encode_to_bytes(SimpleString("OK"), False) == b"+OK\r\n"
    assert encode_to_bytes(7, True) == b":7\r\n"
    assert encode_to_bytes(-123456789012, True) == b":-123456789012\r\n"
    assert encode_to_bytes(True, True) == b":1\r\n"
    assert encode_to_bytes("h\u00e9", False) == b"$3\r\nh\xc3\xa9\r\n"
    assert encode_to_bytes(NullArray(), False) == b"*-1\r\n"
    assert encode_to_bytes(NullArray(), True) == b"_\r\n"
    assert encode_to_bytes(Verbatim("hi"), True) == b"=6\r\ntxt:hi\r\n"
    assert encode_to_bytes(Verbatim("hi"), False) == b"$2\r\nhi\r\n"
    assert encode_to_bytes([ErrorReply("ERR", "bad"), 1], True) == b"*2\r\n-ERR bad\r\n:1\r\n"
    assert encode_to_bytes(float("inf"), True) == b",inf\r\n"
    assert encode_to_bytes(memoryview(b"abc"), True) == b"$3\r\nabc\r\n"


def test_encoder_queues_large_payloads_without_copying() -> None:
    from pion.server.resp.encoder import encode_reply

    payload = bytes(100_000)
    out: list[object] = []
    encode_reply(payload, False, out)
    assert out[1] is payload
    assert out[0] == b"$100000\r\n"


def test_inline_splitting_follows_redis_quoting_rules() -> None:
    assert split_inline(b'SET "a b" \'it\\\'s\'') == [b"SET", b"a b", b"it's"]
    assert split_inline(b'ECHO "\\x41\\n"') == [b"ECHO", b"A\n"]
    assert split_inline(b"   ") == []
    with pytest.raises(InlineError):
        split_inline(b'ECHO "unterminated')
    with pytest.raises(InlineError):
        split_inline(b'ECHO "a"b')


# ---- live server: RESP2 / RESP3 -------------------------------------------------------------
def test_resp2_and_resp3_nulls_and_maps_on_the_wire(shared_pion_server: ServerProcess) -> None:
    port = shared_pion_server.port
    reply2 = raw_exchange(port, b"*2\r\n$3\r\nGET\r\n$13\r\nproto:missing\r\n")
    assert reply2 == b"$-1\r\n"
    reply3 = raw_exchange(port, b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"
                                b"*2\r\n$3\r\nGET\r\n$13\r\nproto:missing\r\n")
    assert reply3.startswith(b"%8\r\n$6\r\nserver\r\n")
    assert reply3.endswith(b"_\r\n")


def test_redis_py_gets_the_same_answers_over_resp2_and_resp3(
        shared_pion_server: ServerProcess) -> None:
    for protocol in (2, 3):
        with shared_pion_server.client(protocol=protocol) as conn:
            key = f"proto:rt:{protocol}"
            assert conn.set(key, b"\x00\xff\r\n") is True
            assert conn.get(key) == b"\x00\xff\r\n"
            assert conn.get("proto:absent") is None
            assert conn.mget([key, "proto:absent"]) == [b"\x00\xff\r\n", None]
            assert conn.exists(key, key, "proto:absent") == 2
            assert conn.client_id() > 0


def test_pipelined_commands_come_back_in_order(shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client() as conn:
        pipe = conn.pipeline(transaction=False)
        for i in range(2000):
            pipe.set(f"pipe:{i}", str(i))
            pipe.get(f"pipe:{i}")
            pipe.echo(f"e{i}")
        replies = pipe.execute()
    expected = []
    for i in range(2000):
        expected += [True, str(i).encode(), f"e{i}".encode()]
    assert replies == expected


def test_thirty_two_megabyte_values_round_trip(shared_pion_server: ServerProcess) -> None:
    value = bytes(range(256)) * (32 * MB // 256)
    for protocol in (2, 3):
        with shared_pion_server.client(protocol=protocol) as conn:
            assert conn.set(f"big:{protocol}", value) is True
            assert conn.get(f"big:{protocol}") == value
            assert conn.delete(f"big:{protocol}") == 1


# ---- inline commands ------------------------------------------------------------------------
def test_inline_commands_work_like_printf_into_nc(shared_pion_server: ServerProcess) -> None:
    reply = raw_exchange(shared_pion_server.port,
                         b'PING\r\nSET inline:k "two words"\r\nGET inline:k\r\n\r\nECHO x\n')
    assert reply == b"+PONG\r\n+OK\r\n$9\r\ntwo words\r\n$1\r\nx\r\n"


def test_inline_command_with_unbalanced_quotes_is_a_protocol_error(
        shared_pion_server: ServerProcess) -> None:
    reply = raw_exchange(shared_pion_server.port, b'ECHO "oops\r\nPING\r\n')
    assert reply == b"-ERR Protocol error: unbalanced quotes in request\r\n"


# ---- malformed frames -------------------------------------------------------------------------
@pytest.mark.parametrize(("frame", "error"), [
    (b"*2\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n", b"expected '$', got '*'"),
    (b"*1\r\n:5\r\n", b"expected '$', got ':'"),
    (b"*1\r\n$abc\r\n", b"invalid bulk length"),
    (b"*1\r\n$-5\r\n", b"invalid bulk length"),
    (b"*abc\r\n", b"invalid multibulk length"),
    (b"*1048577\r\n", b"invalid multibulk length"),
    (b"*3000000000\r\n", b"invalid multibulk length"),
    (b"*1\r\n$2000000000\r\n", b"invalid bulk length"),
])
def test_malformed_frame_closes_only_that_connection(shared_pion_server: ServerProcess,
                                                    frame: bytes, error: bytes) -> None:
    with shared_pion_server.client() as other:
        other.set("malformed:keep", b"intact")
        with socket.create_connection(("127.0.0.1", shared_pion_server.port), timeout=5) as bad:
            bad.sendall(b"*1\r\n$4\r\nPING\r\n" + frame + b"*1\r\n$4\r\nPING\r\n")
            time.sleep(0.2)
            data = bad.recv(65536)
            assert data == b"+PONG\r\n-ERR Protocol error: " + error + b"\r\n"
            assert data.count(b"\r\n") == 2
            assert is_closed_by_server(bad) is True
        assert other.get("malformed:keep") == b"intact"
        assert other.ping() is True


def test_bulk_longer_than_proto_max_bulk_len_is_refused(limited_server: ServerProcess) -> None:
    with limited_server.client() as conn:
        assert conn.set("limit:ok", bytes(MB)) is True
        with pytest.raises(redis.exceptions.ResponseError, match="Protocol error: invalid bulk length"):
            conn.set("limit:too-big", bytes(MB + 1))
    with limited_server.client() as conn:
        assert conn.exists("limit:too-big") == 0
        assert len(conn.get("limit:ok") or b"") == MB


# ---- flow control ---------------------------------------------------------------------------
def test_slow_reader_over_the_output_buffer_cap_is_disconnected(
        limited_server: ServerProcess) -> None:
    keys = [f"slow:{i}".encode() for i in range(32)]
    with limited_server.client() as conn:
        conn.mset({k: bytes(MB) for k in keys})  # one MGET reply of 32 MB
    with socket.create_connection(("127.0.0.1", limited_server.port), timeout=5) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"*33\r\n$4\r\nMGET\r\n" + b"".join(b"$%d\r\n%b\r\n" % (len(k), k)
                                                           for k in keys))
        deadline = time.monotonic() + 5
        while "client-output-buffer-limit" not in limited_server.log() \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "client-output-buffer-limit" in limited_server.log()
        with limited_server.client() as conn:
            assert len(conn.client_list()) == 1  # only this one: the slow reader is gone
    with limited_server.client() as conn:
        assert conn.ping() is True


def test_pipelined_reader_that_pauses_gets_backpressure_and_every_reply(
        shared_pion_server: ServerProcess) -> None:
    with shared_pion_server.client() as conn:
        conn.set("bp:value", bytes(MB))
        rss_before = int(conn.info("memory")["used_memory_rss"])
    n_gets = 300  # 300 MB of replies queued behind a client that does not read
    request = b"*2\r\n$3\r\nGET\r\n$8\r\nbp:value\r\n" * n_gets
    with socket.create_connection(("127.0.0.1", shared_pion_server.port), timeout=10) as sock:
        sock.sendall(request)
        time.sleep(1.0)
        with shared_pion_server.client() as conn:
            assert conn.ping() is True
            rss_paused = int(conn.info("memory")["used_memory_rss"])
        expected = (b"$%d\r\n" % MB + bytes(MB) + b"\r\n") * n_gets
        received = bytearray()
        while len(received) < len(expected):
            chunk = sock.recv(4 << 20)
            assert chunk != b""
            received += chunk
    assert rss_paused - rss_before < 64 * MB
    assert bytes(received) == expected


def test_clients_beyond_maxclients_are_refused_with_an_error(
        limited_server: ServerProcess) -> None:
    conns = [socket.create_connection(("127.0.0.1", limited_server.port), timeout=5)
             for _ in range(3)]
    try:
        for sock in conns:
            sock.sendall(b"PING\r\n")
            assert sock.recv(100) == b"+PONG\r\n"
        extra = raw_exchange(limited_server.port, b"")
        assert extra == b"-ERR max number of clients reached\r\n"
    finally:
        for sock in conns:
            sock.close()


def test_empty_and_null_multibulk_requests_are_ignored(shared_pion_server: ServerProcess) -> None:
    reply = raw_exchange(shared_pion_server.port, b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n")
    assert reply == b"+PONG\r\n"
