"""Pipelined inline commands (``redis-benchmark -t ping`` sends half its PINGs inline): each
is answered in order, counted once in INFO commandstats, and framed the same whether its CR
LF arrives in one read or two (issue 13 changed how the framer slices an inline line and how
back-to-back inline requests share clock reads)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import hiredis
import pytest

from support.procs import ServerProcess, start_server


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path / "data")
    try:
        yield proc
    finally:
        proc.stop()


def _exchange(port: int, chunks: list[bytes], count: int) -> list[object]:
    reader = hiredis.Reader()
    replies: list[object] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i, chunk in enumerate(chunks):
            if i:
                time.sleep(0.01)  # the server reads each part on its own
            sock.sendall(chunk)
        while len(replies) < count:
            data = sock.recv(65536)
            if not data:
                break
            reader.feed(data)
            while (reply := reader.gets()) is not False:
                replies.append(reply)
    return replies


def _calls(server: ServerProcess, command: str) -> int:
    with server.client() as r:
        stats = r.info("commandstats")
    return int(stats[f"cmdstat_{command}"]["calls"]) if f"cmdstat_{command}" in stats else 0


def test_a_pipeline_of_inline_pings_is_answered_in_order_and_counted_once_each(
        server: ServerProcess) -> None:
    before = _calls(server, "ping")
    replies = _exchange(server.port, [b"PING\r\n" * 16 + b"PING hello\r\n" + b"PING\n" * 3], 20)
    assert replies == [b"PONG"] * 16 + [b"hello"] + [b"PONG"] * 3
    assert _calls(server, "ping") == before + 20
    with server.client() as r:
        assert float(r.info("commandstats")["cmdstat_ping"]["usec"]) >= 0.0


def test_an_inline_line_whose_cr_and_lf_arrive_in_separate_reads_is_one_request(
        server: ServerProcess) -> None:
    replies = _exchange(server.port, [b"ECHO 'a b'\r", b"\nPING\r\nECHO \"x\\ty\"\r", b"\n"], 3)
    assert replies == [b"a b", b"PONG", b"x\ty"]


def test_quoted_inline_words_in_a_pipeline_keep_redis_splitting(server: ServerProcess) -> None:
    stream = b"SET \"inl k\" 'it\\'s'\r\nGET \"inl k\"\r\nECHO \"\\x41\\n\"\r\n  \r\nPING\r\n"
    assert _exchange(server.port, [stream], 4) == [b"OK", b"it's", b"A\n", b"PONG"]


def test_an_unbalanced_quote_mid_pipeline_answers_the_requests_before_it_then_errors(
        server: ServerProcess) -> None:
    stream = b"PING\r\nECHO before\r\nECHO \"unterminated\r\nPING\r\n"
    replies = _exchange(server.port, [stream], 3)
    assert replies[:2] == [b"PONG", b"before"]
    assert isinstance(replies[2], hiredis.ReplyError)
    assert str(replies[2]) == "ERR Protocol error: unbalanced quotes in request"
    with server.client() as r:
        assert r.ping() is True  # other clients are untouched
