"""The TTL clock is read once per request batch (issue 13, Redis's cached mstime)."""

from __future__ import annotations

import socket
import time

import hiredis

from pion.server.store.batch_clock import BatchClock, now_ms
from support.procs import ServerProcess


def test_inside_a_batch_every_read_returns_the_first_reads_millisecond() -> None:
    clock = BatchClock()
    clock.begin()
    first = clock.now_ms()
    time.sleep(0.003)
    assert clock.now_ms() == first
    clock.end()
    assert clock.now_ms() >= first + 3


def test_a_new_batch_reads_the_clock_again() -> None:
    clock = BatchClock()
    clock.begin()
    first = clock.now_ms()
    clock.end()
    time.sleep(0.003)
    clock.begin()
    assert clock.now_ms() >= first + 3
    clock.end()


def test_outside_a_batch_now_ms_is_the_wall_clock() -> None:
    before = int(time.time() * 1000)
    assert before <= now_ms() <= int(time.time() * 1000)


def test_a_key_set_and_read_in_one_pipelined_batch_keeps_redis_ttl_semantics(
        shared_pion_server: ServerProcess) -> None:
    # One read holding: SET with a 1 ms TTL, PTTL, GET; then, in a later batch, GET again.
    requests = [[b"SET", b"bc:k", b"v", b"PX", b"1"], [b"PTTL", b"bc:k"], [b"GET", b"bc:k"]]
    wire = b"".join(b"*%d\r\n" % len(r) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in r)
                    for r in requests)
    reader = hiredis.Reader()
    replies: list[object] = []
    with socket.create_connection(("127.0.0.1", shared_pion_server.port), timeout=10) as sock:
        sock.sendall(wire)
        while len(replies) < 3:
            reader.feed(sock.recv(65536))
            while (reply := reader.gets()) is not False:
                replies.append(reply)
        time.sleep(0.01)
        sock.sendall(b"*2\r\n$3\r\nGET\r\n$4\r\nbc:k\r\n*2\r\n$4\r\nPTTL\r\n$4\r\nbc:k\r\n")
        while len(replies) < 5:
            reader.feed(sock.recv(65536))
            while (reply := reader.gets()) is not False:
                replies.append(reply)
    # Within the batch the key is alive with its whole millisecond (Redis: same mstime);
    # once the batch is over it has expired.
    assert replies == [b"OK", 1, b"v", None, -2]
