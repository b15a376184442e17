"""INFO cpu / commandstats / errorstats with real figures, INFO default vs all, and EXPIRE's
option combinations, each as Redis answers them."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from support.procs import ServerProcess, start_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path / "info", password="pw")
    try:
        yield proc
    finally:
        proc.stop()


def test_commandstats_count_calls_failures_and_rejections(server: ServerProcess) -> None:
    with server.client() as conn:
        for i in range(7):
            conn.set(f"cs:{i}", b"v")
        for _ in range(3):
            conn.get("cs:0")
        with pytest.raises(redis.ResponseError):
            conn.execute_command("GET")  # arity: rejected, not called
        with pytest.raises(redis.ResponseError):
            conn.execute_command("EXPIRE", "cs:0", "soon")  # ran and failed
        stats = conn.info("commandstats")
    assert stats["cmdstat_set"]["calls"] == 7
    assert stats["cmdstat_set"]["failed_calls"] == 0
    assert stats["cmdstat_get"]["calls"] == 3
    assert stats["cmdstat_get"]["rejected_calls"] == 1
    assert stats["cmdstat_expire"]["calls"] == 1
    assert stats["cmdstat_expire"]["failed_calls"] == 1
    assert stats["cmdstat_set"]["usec"] >= 0
    assert stats["cmdstat_set"]["usec_per_call"] == pytest.approx(
        stats["cmdstat_set"]["usec"] / 7, abs=0.01)


def test_errorstats_count_each_error_code(server: ServerProcess) -> None:
    with server.client() as conn:
        errors_before = conn.info("errorstats")
        total_before = conn.info("stats")["total_error_replies"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET x\r\nGET y\r\n")  # two NOAUTH replies, nothing else sent
        received = b""
        deadline = time.monotonic() + 5
        while received.count(b"-NOAUTH") < 2 and time.monotonic() < deadline:
            received += sock.recv(1000)
        assert received.count(b"-NOAUTH") == 2
    with server.client() as conn:
        with pytest.raises(redis.ResponseError):
            conn.execute_command("NOSUCHCOMMAND")
        errors = conn.info("errorstats")
        total = conn.info("stats")["total_error_replies"]

    def count(stats: dict[str, dict[str, int]], code: str) -> int:
        return stats.get(f"errorstat_{code}", {"count": 0})["count"]

    assert count(errors, "NOAUTH") - count(errors_before, "NOAUTH") == 2
    assert count(errors, "ERR") - count(errors_before, "ERR") == 1
    assert total - total_before == 3


def test_cpu_section_reports_the_process_rusage(server: ServerProcess) -> None:
    with server.client() as conn:
        cpu = conn.info("cpu")
    for field in ("used_cpu_sys", "used_cpu_user", "used_cpu_sys_children",
                  "used_cpu_user_children", "used_cpu_sys_main_thread",
                  "used_cpu_user_main_thread"):
        assert isinstance(cpu[field], float)
    assert cpu["used_cpu_user"] + cpu["used_cpu_sys"] > 0.0


def raw_info(port: int, *sections: bytes) -> str:
    """INFO's text as sent (redis-py would parse it into a dict)."""
    request = b" ".join([b"INFO", *sections]) + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"AUTH pw\r\n" + request)
        data = b""
        while data.count(b"\r\n") < 2 or not data.endswith(b"\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            header_end = data.find(b"\r\n", 5)
            if data.startswith(b"+OK\r\n$") and header_end > 0:
                length = int(data[6:header_end])
                if len(data) >= header_end + 2 + length + 2:
                    break
    return data.decode()


def test_info_default_leaves_out_commandstats_and_all_includes_it(server: ServerProcess) -> None:
    with server.client() as conn:
        conn.ping()
    default = raw_info(server.port)
    named_default = raw_info(server.port, b"default")
    everything = raw_info(server.port, b"all")
    assert "# Commandstats" not in default
    assert "# Commandstats" not in named_default
    assert "# CPU" in default
    assert "# Errorstats" in default
    assert "# Commandstats" in everything
    assert "cmdstat_ping:calls=" in everything


def test_expire_accepts_xx_with_gt_or_lt_and_refuses_what_redis_refuses(
        server: ServerProcess) -> None:
    with server.client() as conn:
        conn.set("e:k", b"v")
        assert conn.execute_command("EXPIRE", "e:k", "100", "XX", "GT") == 0  # no TTL yet
        assert conn.execute_command("EXPIRE", "e:k", "100", "XX", "LT") == 0  # XX: no TTL
        assert conn.execute_command("EXPIRE", "e:k", "100") == 1
        assert conn.execute_command("EXPIRE", "e:k", "200", "XX", "GT") == 1
        assert conn.execute_command("EXPIRE", "e:k", "150", "XX", "GT") == 0
        assert conn.execute_command("PEXPIRE", "e:k", "50000", "LT", "XX") == 1
        assert 0 < conn.pttl("e:k") <= 50000
        for bad in (["NX", "XX"], ["NX", "GT"], ["NX", "LT"]):
            with pytest.raises(redis.ResponseError, match="NX and XX, GT or LT options at the "
                                                          "same time are not compatible"):
                conn.execute_command("EXPIRE", "e:k", "10", *bad)
        with pytest.raises(redis.ResponseError,
                           match="GT and LT options at the same time are not compatible"):
            conn.execute_command("EXPIRE", "e:k", "10", "GT", "LT")
        assert 0 < conn.pttl("e:k") <= 50000  # nothing changed by the refusals
