"""kill -9 at random moments: every acknowledged write survives, nothing half-written appears.

Several client threads stream V.STOREBATCH into their own sessions; the server is
killed with SIGKILL mid-stream (and mid-SAVE / mid-BGSAVE); after a restart each
session must hold exactly the acknowledged rows, bit-equal, plus at most the one
write that was in flight when the kill came — whole, never part of it.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from support.procs import ServerProcess, start_server

KV_DIM = 256  # fp32: 1 KiB per row
ROWS_PER_WRITE = 16  # 16 KiB per STOREBATCH


@dataclass
class Stream:
    """What one client thread wrote and what the server acknowledged."""

    sid: str
    seed: int
    acked_rows: int = 0
    in_flight: tuple[int, bytes] | None = None
    errors: list[str] = field(default_factory=list)

    def batch(self, index: int) -> bytes:
        rng = np.random.default_rng(self.seed * 100_000 + index)
        return rng.standard_normal((ROWS_PER_WRITE, KV_DIM)).astype("<f4").tobytes()


def _writer(server: ServerProcess, stream: Stream, stop: threading.Event, first_batch: int) -> None:
    conn = server.client(socket_timeout=5, retry=Retry(NoBackoff(), 0))  # never resend after the kill
    index = first_batch
    try:
        while not stop.is_set():
            data = stream.batch(index)
            stream.in_flight = (stream.acked_rows, data)
            rows = conn.execute_command("V.STOREBATCH", stream.sid, 0, stream.acked_rows, data)
            stream.acked_rows = int(rows)
            stream.in_flight = None
            index += 1
    except (redis.ConnectionError, redis.TimeoutError):
        pass  # the server was killed
    except redis.ResponseError as e:
        stream.errors.append(str(e))
    finally:
        conn.close()


def _expected(stream: Stream, first_batches: list[int]) -> bytes:
    return b"".join(stream.batch(i) for i in first_batches)


def _check(server: ServerProcess, stream: Stream, acked: bytes) -> int:
    """The session holds the acked rows bit-equal, plus nothing or exactly the in-flight batch."""
    conn = server.client()
    info = conn.execute_command("V.INFO", stream.sid)
    fields = dict(zip(info[::2], info[1::2], strict=True))
    rows = int(fields[b"tokens"])
    assert rows >= stream.acked_rows, f"{stream.sid}: acknowledged rows lost"
    stored = conn.execute_command("V.FETCH", stream.sid, 0, "RANGE", 0, rows)
    assert stored[: len(acked)] == acked
    if rows > stream.acked_rows:
        assert stream.in_flight is not None
        start, data = stream.in_flight
        assert start == stream.acked_rows
        assert rows == stream.acked_rows + ROWS_PER_WRITE
        assert stored[len(acked):] == data, f"{stream.sid}: the unacknowledged write is not whole"
    conn.close()
    return rows


def _run_streams(server: ServerProcess, streams: list[Stream], seconds: float,
                 during: object = None) -> list[list[int]]:
    """Stream writes for ``seconds`` (calling ``during()`` meanwhile), then kill -9; returns batch ids."""
    stop = threading.Event()
    starts = [s.acked_rows // ROWS_PER_WRITE for s in streams]
    threads = [threading.Thread(target=_writer, args=(server, s, stop, starts[i]), daemon=True)
               for i, s in enumerate(streams)]
    for t in threads:
        t.start()
    if callable(during):
        during()
    time.sleep(seconds)
    server.kill9()
    stop.set()
    for t in threads:
        t.join(timeout=10)
    return [list(range(s.acked_rows // ROWS_PER_WRITE + (1 if s.in_flight else 0))) for s in streams]


@pytest.mark.parametrize("policy", ["everysec", "always"])
def test_kill9_during_concurrent_storebatch_loses_nothing_acknowledged(tmp_path: Path, policy: str) -> None:
    rng = random.Random(policy)
    data_dir = tmp_path / "data"
    server = start_server(data_dir, "--appendfsync", policy)
    streams = [Stream(f"s{i}", i) for i in range(4)]
    try:
        with server.client() as setup:
            for s in streams:
                setup.execute_command("V.CREATE", s.sid, KV_DIM)
        for _cycle in range(3):
            _run_streams(server, streams, rng.uniform(0.2, 0.8))
            server = start_server(data_dir, "--appendfsync", policy)
            for s in streams:
                assert s.errors == []
                acked = b"".join(s.batch(i) for i in range(s.acked_rows // ROWS_PER_WRITE))
                rows = _check(server, s, acked)
                s.acked_rows, s.in_flight = rows, None  # the whole in-flight write counts from now on
        assert sum(s.acked_rows for s in streams) > 0
    finally:
        server.stop()


def _big_store(server: ServerProcess, n_sessions: int = 8, rows: int = 2048) -> dict[str, bytes]:
    """~64 MB of fp32 rows so a snapshot takes long enough to be interrupted."""
    conn = server.client()
    content = {}
    for i in range(n_sessions):
        sid = f"big{i}"
        data = np.random.default_rng(i).standard_normal((rows, 1024)).astype("<f4").tobytes()
        conn.execute_command("V.CREATE", sid, 1024)
        conn.execute_command("V.STOREBATCH", sid, 0, 0, data)
        content[sid] = data
    conn.close()
    return content


def _wait_for(path: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.001)


@pytest.mark.parametrize("command", ["SAVE", "BGSAVE"])
def test_kill9_in_the_middle_of_a_snapshot_restarts_with_the_same_data(tmp_path: Path, command: str) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    try:
        content = _big_store(server)
        server.client().execute_command("SAVE")  # a previous snapshot exists
        conn = server.client()
        extra = np.random.default_rng(99).standard_normal((4, 1024)).astype("<f4").tobytes()
        conn.execute_command("V.STOREBATCH", "big0", 0, 2048, extra)  # only in the WAL
        content["big0"] += extra
        stream = Stream("live", 7)
        conn.execute_command("V.CREATE", "live", KV_DIM)

        def snapshot_then_wait() -> None:
            threading.Thread(target=_issue, args=(server, command), daemon=True).start()
            _wait_for(data_dir / "pion.vstore.0.tmp")

        _run_streams(server, [stream], 0.0 if command == "SAVE" else 0.05, during=snapshot_then_wait)
        server = start_server(data_dir)
        conn = server.client()
        for sid, data in content.items():
            assert conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, len(data) // 4096) == data
        acked = b"".join(stream.batch(i) for i in range(stream.acked_rows // ROWS_PER_WRITE))
        _check(server, stream, acked)
        assert not (data_dir / "pion.vstore.0.tmp").exists()
    finally:
        server.stop()


def _issue(server: ServerProcess, command: str) -> None:
    try:
        with server.client(socket_timeout=30, retry=Retry(NoBackoff(), 0)) as conn:
            conn.execute_command(command)
    except (redis.ConnectionError, redis.TimeoutError):
        pass
