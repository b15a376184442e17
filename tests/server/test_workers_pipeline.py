"""A client's pipeline on worker 1 of ``-w 2``: its runs of forwarded keyspace commands go to
worker 0 as one batch each (net.py ``_forward_batch``), with Redis's pipelining semantics —
replies in request order, an error in the middle answered and the rest still run, a local
command (SELECT, FLUSHALL, PION.WORKER) run only after every forwarded command before it.

The check: the same bytes sent to worker 1 (forwarding, batched), to worker 0 (which owns the
keyspace and forwards nothing) and to a ``--worker-forward-batch 1`` server (one command at a
time) get the same replies.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest

from support.workers import WorkerGroup, start_workers


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGroup]:
    started = start_workers(tmp_path_factory.mktemp("pipe"), 2, "--worker-forward-batch", "1024")
    try:
        yield started
    finally:
        started.server.stop()


@pytest.fixture(scope="module")
def unbatched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGroup]:
    started = start_workers(tmp_path_factory.mktemp("pipe1"), 2, "--worker-forward-batch", "1")
    try:
        yield started
    finally:
        started.server.stop()


def encode(*args: Any) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def pipeline(port: int, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Send every command in one write; every reply, errors as their text."""
    reader = hiredis.Reader()
    replies: list[Any] = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"".join(encode(*c) for c in commands))
        while len(replies) < len(commands):
            reply = reader.gets()
            if reply is False:
                chunk = sock.recv(1 << 16)
                assert chunk, f"closed after {len(replies)} replies"
                reader.feed(chunk)
                continue
            replies.append(f"-{reply}" if isinstance(reply, hiredis.ReplyError) else reply)
    return replies


def mixed(tag: str) -> list[tuple[Any, ...]]:
    k1, k2 = f"{tag}:k1", f"{tag}:k2"
    return [
        ("SET", k1, "v1"), ("GET", k1), ("INCR", k1), ("GET", f"{tag}:missing"), ("GET",),
        ("SET", k2, "2"), ("INCR", k2), ("NOSUCHCOMMAND", k1), ("MGET", k1, k2, "x"),
        ("SELECT", "1"), ("GET", k1), ("SET", k1, "db1"), ("GET", k1), ("DEL", k1),
        ("SELECT", "0"), ("GET", k1), ("EXPIRE", k1, "100"), ("TTL", k1), ("HSET", f"{tag}:h", "f", "1"),
        ("HINCRBY", f"{tag}:h", "f", "x"), ("HGETALL", f"{tag}:h"), ("TYPE", f"{tag}:h"),
        ("DEL", k1, k2, f"{tag}:h"), ("EXISTS", k1, k2),
    ]


EXPECTED_MIXED = [
    b"OK", b"v1", "-ERR value is not an integer or out of range", None,
    "-ERR wrong number of arguments for 'get' command", b"OK", 3,
    "-ERR unknown command 'NOSUCHCOMMAND', with args beginning with: '{k1}' ", [b"v1", b"3", None],
    b"OK", None, b"OK", b"db1", 1,
    b"OK", b"v1", 1, 100, 1,
    "-ERR value is not an integer or out of range", [b"f", b"1"], b"hash",
    3, 0,
]


@pytest.mark.parametrize("worker", [1, 0])
def test_a_mixed_pipeline_answers_in_order_with_errors_in_the_middle(group: WorkerGroup, worker: int) -> None:
    tag = f"mixed{worker}"
    expected = [e.replace("{k1}", f"{tag}:k1") if isinstance(e, str) else e for e in EXPECTED_MIXED]
    assert pipeline(group.ports[worker], mixed(tag)) == expected


def test_batched_and_one_at_a_time_forwarding_answer_the_same(group: WorkerGroup, unbatched: WorkerGroup) -> None:
    batched = pipeline(group.ports[1], mixed("same"))
    assert pipeline(unbatched.ports[1], mixed("same")) == batched


def test_a_pipeline_longer_than_one_batch_keeps_every_reply_in_order(group: WorkerGroup) -> None:
    n = 2500  # more than the fixture's --worker-forward-batch 1024: three batches
    commands: list[tuple[Any, ...]] = []
    for i in range(n):
        commands += [("SET", f"long:{i}", i), ("GET", f"long:{i}")]
    commands.append(("DBSIZE",))
    replies = pipeline(group.ports[1], commands)
    assert replies[:-1] == [r for i in range(n) for r in (b"OK", str(i).encode())]
    assert replies[-1] >= n
    assert pipeline(group.ports[1], [("DEL", *(f"long:{i}" for i in range(n)))]) == [n]


def test_a_local_command_after_forwarded_ones_sees_them_done(group: WorkerGroup) -> None:
    """FLUSHALL runs on worker 1 and reaches worker 0 over another link: it must not overtake
    the SETs sent before it in the same pipeline (they would survive the flush)."""
    commands: list[tuple[Any, ...]] = [("SET", f"flush:{i}", "v") for i in range(50)]
    commands += [("FLUSHALL",), ("DBSIZE",), ("SET", "flush:after", "v"), ("PION.WORKER",), ("DBSIZE",)]
    replies = pipeline(group.ports[1], commands)
    assert replies[:50] == [b"OK"] * 50
    assert (replies[50], replies[51], replies[52], replies[54]) == (b"OK", 0, b"OK", 1)
    assert replies[53][:2] == [b"id", 1]
    assert pipeline(group.ports[1], [("FLUSHALL",)]) == [b"OK"]
