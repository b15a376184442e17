"""kill -9 while clients pipeline small writes: the records that go through the batch buffer.

The STOREBATCH crash test writes 16 KiB blobs, which the WAL writes one by one; here every
write is small (SET, one-row V.STOREBATCH), so it is buffered and written once per event-loop
batch. Whatever was acknowledged before the kill must be there after the restart, bit-equal.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from support.procs import start_server

CLIENTS = 4
PIPELINE = 32
KV_DIM = 8  # fp32: 32 bytes per row


def _row(client: int, i: int) -> bytes:
    return np.full(KV_DIM, client * 100_000 + i, dtype="<f4").tobytes()


@pytest.mark.parametrize("policy", ["everysec", "always"])
def test_kill9_during_pipelined_small_writes_loses_nothing_acknowledged(tmp_path: Path, policy: str) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir, "--appendfsync", policy)
    acked = [0] * CLIENTS  # writes 0..acked-1 of each client were answered
    stop = threading.Event()

    def writer(client: int) -> None:
        r = server.client(socket_timeout=10)
        r.execute_command("V.CREATE", f"s{client}", KV_DIM)
        i = 0
        try:
            while not stop.is_set():
                pipe = r.pipeline(transaction=False)
                for j in range(i, i + PIPELINE):
                    pipe.set(f"c{client}:{j}", f"value {client} {j}")
                    pipe.execute_command("V.STOREBATCH", f"s{client}", 0, j, _row(client, j))
                replies = pipe.execute()
                assert replies[-1] == i + PIPELINE
                i += PIPELINE
                acked[client] = i
        except (redis.ConnectionError, redis.TimeoutError):
            return  # the server was killed mid-pipeline

    threads = [threading.Thread(target=writer, args=(c,)) for c in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while min(acked) < 4 * PIPELINE and time.monotonic() < deadline:
            time.sleep(0.05)
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join(timeout=20)
        assert min(acked) >= 4 * PIPELINE
        server = start_server(data_dir, "--appendfsync", policy)
        r = server.client()
        for client in range(CLIENTS):
            n = acked[client]
            values = r.mget([f"c{client}:{j}" for j in range(n)])
            assert values == [f"value {client} {j}".encode() for j in range(n)]
            rows = r.execute_command("V.FETCH", f"s{client}", 0, "RANGE", 0, n)
            assert rows == b"".join(_row(client, j) for j in range(n))
    finally:
        stop.set()
        server.stop()
