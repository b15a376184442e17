"""The framing layer under random input: splits, garbage, huge declared lengths, before and
after AUTH. The server must stay up, keep answering another client's PING, keep its memory
bounded, and never change stored data because of a bad frame."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.procs import ServerProcess, start_server

PASSWORD = "fuzz-pw"


def encode(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%b\r\n" % (len(w), w) for w in words)


HUGE = st.sampled_from([b"*3000000000\r\n", b"*1048577\r\n", b"*2000\r\n", b"*-10\r\n",
                        b"$2000000000\r\n", b"$600000000\r\n", b"$16385\r\n", b"*11\r\n",
                        b"*\x00", b"$-1\r\n", b"*1\r\n$", b"\r\n", b"*0\r\n"])
FRAME = st.one_of(
    st.builds(lambda k, v: encode(b"SET", b"fuzzf:" + k, v), st.binary(max_size=6),
              st.binary(max_size=40)),
    st.builds(lambda k: encode(b"GET", b"fuzzf:" + k), st.binary(max_size=6)),
    st.just(b"PING\r\n"),
    st.just(encode(b"AUTH", PASSWORD.encode())),
    st.just(b"AUTH wrong\r\n"),
    HUGE,
    st.binary(max_size=64),
)


class PingWatch:
    """Another client PINGing every 10 ms in a thread; keeps the slowest answer."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.slowest_s = 0.0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with redis.Redis(host="127.0.0.1", port=self.port, password=PASSWORD,
                         socket_timeout=10) as conn:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    conn.ping()
                except redis.exceptions.RedisError:
                    self.failures += 1
                self.slowest_s = max(self.slowest_s, time.perf_counter() - started)
                time.sleep(0.01)

    def __enter__(self) -> PingWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("fuzz-framing"), password=PASSWORD)
    try:
        yield server
    finally:
        server.stop()


def rss_bytes(server: ServerProcess) -> int:
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(frames=st.lists(FRAME, min_size=1, max_size=12), authenticate=st.booleans(),
       cuts=st.lists(st.integers(1, 400), max_size=6))
def test_random_frames_and_splits_never_hurt_the_server_or_other_clients(
        fuzz_server: ServerProcess, frames: list[bytes], authenticate: bool,
        cuts: list[int]) -> None:
    stream = (encode(b"AUTH", PASSWORD.encode()) if authenticate else b"") + b"".join(frames)
    stream = stream or b"PING\r\n"
    points = sorted({c % len(stream) for c in cuts} - {0})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    with socket.create_connection(("127.0.0.1", fuzz_server.port)) as sock:
        sock.settimeout(2)
        try:
            for chunk in chunks:
                sock.sendall(chunk)
            sock.recv(65536)
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            pass
    assert fuzz_server.proc.poll() is None


def test_huge_headers_from_many_clients_keep_the_server_answering_and_memory_bounded(
        fuzz_server: ServerProcess) -> None:
    with fuzz_server.client(socket_timeout=5) as conn:
        conn.set("fuzzf:canary", b"kept")
    before = rss_bytes(fuzz_server)
    with PingWatch(fuzz_server.port) as watch:
        # Huge declared lengths from many clients at once, before and after AUTH.
        socks = []
        for i in range(60):
            sock = socket.create_connection(("127.0.0.1", fuzz_server.port))
            if i % 2:
                sock.sendall(encode(b"AUTH", PASSWORD.encode()))
            sock.sendall([b"*3000000000\r\n", b"*1048576\r\n$1\r\n", b"*1\r\n$500000000\r\n",
                          b"*5\r\n$3\r\nSET\r\n"][i % 4])
            socks.append(sock)
        time.sleep(0.5)
        for sock in socks:
            sock.close()
        time.sleep(0.5)
    after = rss_bytes(fuzz_server)
    assert watch.failures == 0
    # The reported stall was 5.7-9.2 s when one such connection closed; generous bound
    # here (a shared 2-core machine), the measured figure is in docs/benchmarks.md.
    assert watch.slowest_s < 2.0, f"slowest PING {watch.slowest_s * 1e3:.0f} ms"
    assert after - before < 64 * 1024 * 1024
    with fuzz_server.client(socket_timeout=5) as conn:
        assert conn.get("fuzzf:canary") == b"kept"
    assert "Traceback" not in fuzz_server.log()
