"""INFO used_memory is what --maxmemory bounds, and freed values leave the process (allocator.py):
a real pion-server, LMCache-sized values overwritten with other sizes, then deleted."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import redis

from support.procs import start_server

MiB = 2**20


def memory(r: redis.Redis) -> dict[str, int]:
    info = r.info("everything")
    return {k: int(info[k]) for k in ("used_memory", "used_memory_rss", "keyspace_bytes", "vstore_bytes")}


def test_used_memory_counts_the_keyspace_and_v_store_bytes_and_rss_is_apart(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d", "--binary-port", "0", "--maxmemory", "256mb")
    try:
        with server.client() as r:
            r.set("chunk", b"x" * 300_000)
            r.execute_command("V.CREATE", "s", 16, "VQUANT", "fp16")
            r.execute_command("V.STOREBATCH", "s", 0, 0, np.ones((10, 16), np.float16).tobytes(), "DTYPE", "f16")
            got = memory(r)
    finally:
        server.stop()
    assert got["vstore_bytes"] == 10 * 16 * 2
    assert got["keyspace_bytes"] >= 300_000
    assert got["used_memory"] == got["keyspace_bytes"] + got["vstore_bytes"]
    assert got["used_memory_rss"] > got["used_memory"]


def test_deleted_large_values_are_given_back_to_the_os_after_overwrites_of_other_sizes(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d", "--binary-port", "0", "--appendfsync", "no")
    rng = np.random.default_rng(3)
    try:
        with server.client(socket_timeout=60) as r:
            idle = memory(r)["used_memory_rss"]
            for round_ in range(4):  # glibc raises its mmap threshold after the first frees
                pipe = r.pipeline(transaction=False)
                for i in range(48):
                    pipe.set(f"chunk:{i}", bytes(int(rng.integers(64 * 1024, MiB))))
                pipe.execute()
            full = memory(r)["used_memory_rss"]
            r.delete(*[f"chunk:{i}" for i in range(48)])
            deadline = time.monotonic() + 10
            after = memory(r)["used_memory_rss"]
            while after - idle > 12 * MiB and time.monotonic() < deadline:
                time.sleep(0.2)
                after = memory(r)["used_memory_rss"]
            used = memory(r)["used_memory"]
    finally:
        server.stop()
    assert full - idle > 16 * MiB  # ~24 MiB of values were held
    assert used == 0
    assert (after - idle) // MiB <= 12, (idle // MiB, full // MiB, after // MiB)
