"""``--metrics-port`` against a real pion-server: Prometheus text parsed with prometheus-client's own
parser, each figure checked against what the same server says in INFO / PION.STATS, and the HTTP
endpoint's answers to requests that are not a scrape."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from support.procs import ServerProcess, free_port, start_server


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain; version=")
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    """How much a sample grew between two scrapes (the module shares one server)."""
    key = (name, tuple(sorted(labels.items())))
    return after[key] - before.get(key, 0.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, int]]:
    metrics_port = free_port()
    proc = start_server(tmp_path_factory.mktemp("metrics"), "--metrics-port", str(metrics_port),
                        "--maxmemory", "64mb", "--max-sessions", "2", "--appendfsync", "always",
                        "--binary-port", "0")
    try:
        yield proc, metrics_port
    finally:
        proc.stop()


def test_commands_and_errors_are_counted_per_command_like_info_commandstats(
        server: tuple[ServerProcess, int]) -> None:
    proc, port = server
    with proc.client() as r:
        before = scrape(port)
        for i in range(3):
            r.set(f"k{i}", "v")
        r.get("k0")
        r.get("k1")
        with pytest.raises(redis.ResponseError):
            r.execute_command("GET")  # arity: rejected
        r.hset("h", "f", "v")
        with pytest.raises(redis.ResponseError):
            r.get("h")  # WRONGTYPE: failed
        with pytest.raises(redis.ResponseError):
            r.execute_command("NOSUCHCOMMAND")
        stats = r.info("commandstats")
        samples = scrape(port)
    assert [delta(samples, before, "redis_commands_total", cmd=c) for c in ("set", "get", "hset")] == [3, 3, 1]
    assert delta(samples, before, "redis_commands_rejected_calls_total", cmd="get") == 1
    assert delta(samples, before, "redis_commands_failed_calls_total", cmd="get") == 1
    assert value(samples, "redis_commands_duration_seconds_total", cmd="set") == stats["cmdstat_set"]["usec"] / 1e6
    assert delta(samples, before, "redis_errors_total", err="ERR") == 2
    assert delta(samples, before, "redis_errors_total", err="WRONGTYPE") == 1


def test_kv_commands_have_latency_histograms_whose_count_is_their_calls(server: tuple[ServerProcess, int]) -> None:
    proc, port = server
    with proc.client() as r:
        before = scrape(port)
        r.set("lat", b"x" * 1000)
        for _ in range(5):
            r.get("lat")
        r.exists("lat")
        r.ping()
        samples = scrape(port)
    assert delta(samples, before, "redis_commands_latencies_usec_count", cmd="get") == 5
    assert delta(samples, before, "redis_commands_latencies_usec_bucket", cmd="get", le="+Inf") == 5
    assert delta(samples, before, "redis_commands_latencies_usec_count", cmd="exists") == 1
    assert delta(samples, before, "redis_commands_latencies_usec_count", cmd="set") == 1
    assert value(samples, "redis_commands_latencies_usec_count", cmd="get") == value(
        samples, "redis_commands_total", cmd="get")
    latency_commands = {dict(labels)["cmd"] for name, labels in samples
                        if name == "redis_commands_latencies_usec_count"}
    assert "ping" in {dict(labels)["cmd"] for name, labels in samples if name == "redis_commands_total"}
    assert "ping" not in latency_commands  # PING is not a KV command
    buckets = [v for (name, labels), v in samples.items()
               if name == "redis_commands_latencies_usec_bucket" and ("cmd", "get") in labels]
    assert buckets == sorted(buckets)  # cumulative


def test_memory_wal_and_keyspace_figures_match_info(server: tuple[ServerProcess, int]) -> None:
    proc, port = server
    with proc.client() as r:
        r.set("mem", b"y" * 4096)
        r.set("ttl", "v", ex=100)
        info = r.info("everything")
        samples = scrape(port)
    assert value(samples, "redis_memory_max_bytes") == 64 * 1024**2
    assert value(samples, "pion_keyspace_bytes") == info["keyspace_bytes"]
    assert value(samples, "pion_wal_bytes") == info["wal_bytes"]
    assert value(samples, "pion_wal_fsync_duration_seconds_count") == info["wal_fsyncs"]
    assert value(samples, "redis_db_keys", db="db0") == info["db0"]["keys"]
    assert value(samples, "redis_db_keys_expiring", db="db0") == info["db0"]["expires"]
    assert value(samples, "redis_aof_last_write_status") == 1


def test_v_store_evictions_are_exported(server: tuple[ServerProcess, int]) -> None:
    proc, port = server
    with proc.client() as r:
        before = value(scrape(port), "pion_vstore_evicted_sessions_total")
        for i in range(3):  # --max-sessions 2: the third evicts the least recently used
            r.execute_command("V.CREATE", f"ev{i}_{before}", 32)
        assert value(scrape(port), "pion_vstore_evicted_sessions_total") == before + 1
        assert value(scrape(port), "pion_vstore_evicted_sessions_total") == r.info("memory")["vstore_evicted_sessions"]


def test_every_pion_stats_field_is_exported(server: tuple[ServerProcess, int]) -> None:
    proc, port = server
    with proc.client() as r:
        r.execute_command("PION.STATS", "RESET")
        r.execute_command("KV.PREFIX.LOOKUP", "absent")
        r.execute_command("KV.PREFIX.REGISTER", "there", 32, "fp16")
        r.execute_command("V.STOREBATCH", "there_pk", 0, 0, bytes(4 * 32 * 3))
        r.execute_command("V.STOREBATCH", "there_pv", 0, 0, bytes(4 * 32 * 3))
        r.execute_command("KV.PREFIX.LOOKUP", "there", "PREFILL_MS", "250")
        stats = dict(zip(*[iter(r.execute_command("PION.STATS"))] * 2))
        samples = scrape(port)
    assert (value(samples, "pion_kvprefix_hits_total"), value(samples, "pion_kvprefix_misses_total")) == (1, 1)
    assert value(samples, "pion_prefill_seconds_avoided_measured_total") == 0.25
    assert value(samples, "pion_kvprefix_hit_rate") == 0.5
    exported = {name.decode(): float(v) for name, v in stats.items() if name != b"uptime_seconds"}
    assert {f: value(samples, f"pion_{f}" if f.endswith("_rate") else f"pion_{f}_total") for f in exported} == exported


def _http(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_requests_that_are_not_a_scrape_get_http_errors_and_the_server_keeps_serving(
        server: tuple[ServerProcess, int]) -> None:
    proc, port = server
    with pytest.raises(urllib.error.HTTPError) as not_found:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
    not_found.value.close()  # an HTTPError holds the response's socket
    assert not_found.value.code == 404
    assert _http(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n").split(b"\r\n")[0] == b"HTTP/1.1 405 Method Not Allowed"
    assert _http(port, b"garbage\r\n\r\n").split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request"
    assert _http(port, b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 5000).split(b"\r\n")[0] == (
        b"HTTP/1.1 431 Request Header Fields Too Large")
    head = _http(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (head.split(b"\r\n")[0], head.endswith(b"\r\n\r\n")) == (b"HTTP/1.1 200 OK", True)
    with proc.client() as r:
        assert r.ping() is True
    assert value(scrape(port), "redis_memory_max_bytes") == 64 * 1024**2


def test_a_metrics_port_in_use_makes_the_server_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = subprocess.run([sys.executable, "-m", "pion.server", "--port", str(free_port()), "--dir",
                               str(tmp_path), "--metrics-port", str(taken.getsockname()[1])],
                              capture_output=True, text=True, timeout=60)
    assert (done.returncode, "metrics" in done.stderr) == (1, True), done.stderr


def test_keyspace_evictions_are_exported_as_redis_evicted_keys_total(server: tuple[ServerProcess, int]) -> None:
    proc, port = server
    with proc.client() as r:
        for i in range(80):  # 80 MiB into a 64 MiB budget under the default allkeys-lru
            r.set(f"evict:{i}", b"e" * 1024**2)
        evicted = r.info("stats")["evicted_keys"]
        assert (evicted > 0, value(scrape(port), "redis_evicted_keys_total")) == (True, evicted)
