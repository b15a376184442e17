"""``--metrics-port`` under ``-w 2`` against a real server: worker 0's one endpoint carries both
workers' counters, each series labelled ``worker``, with authentication between the workers;
PION.METRICS answers one worker's text, and an error without ``--metrics-port``."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from support.procs import free_port, start_server
from support.workers import WorkerGroup, start_workers

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> tuple[Samples, list[str]]:
    """{(sample name, sorted labels): value} of one scrape, and its family names in order."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    families = list(text_string_to_metric_families(text))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in families for s in family.samples}
    return samples, [family.name for family in families]


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGroup, int]]:
    metrics_port = free_port()
    workers = start_workers(tmp_path_factory.mktemp("w2"), 2, "--metrics-port", str(metrics_port),
                            password="s3cret")
    try:
        yield workers, metrics_port
    finally:
        workers.server.stop()


def test_one_scrape_shows_each_workers_own_command_counts_under_a_worker_label(
        group: tuple[WorkerGroup, int]) -> None:
    workers, port = group
    with workers.worker(0) as w0, workers.worker(1) as w1:
        for _ in range(3):
            w0.execute_command("PING")
        for _ in range(5):
            w1.execute_command("PING")
        w1.execute_command("V.CREATE", "m1", 8)
        pings = [int(r.info("commandstats")["cmdstat_ping"]["calls"]) for r in (w0, w1)]
        samples, names = scrape(port)
    assert [value(samples, "redis_commands_total", cmd="ping", worker=w) for w in ("0", "1")] == pings
    assert (pings[0] >= 3, pings[1] >= 5) == (True, True)  # (+ start-up PINGs through the shared port)
    assert value(samples, "redis_commands_total", cmd="v.create", worker="1") == 1
    assert ("redis_commands_total", (("cmd", "v.create"), ("worker", "0"))) not in samples
    assert [value(samples, "pion_worker_up", worker=w) for w in ("0", "1")] == [1.0, 1.0]
    assert len(names) == len(set(names))  # each family once, both workers' samples inside it


def test_every_series_of_a_multi_worker_scrape_names_its_worker(group: tuple[WorkerGroup, int]) -> None:
    workers, port = group
    samples, _ = scrape(port)
    assert {dict(labels).get("worker") for _, labels in samples} == {"0", "1"}
    assert value(samples, "redis_memory_max_bytes", worker="1") == 0.0
    assert value(samples, "pion_vstore_sessions", worker="1") >= 1.0


def test_pion_metrics_answers_the_workers_own_text_and_is_not_served_by_worker_1(
        group: tuple[WorkerGroup, int]) -> None:
    workers, port = group
    with workers.worker(1) as w1:
        text = w1.execute_command("PION.METRICS").decode()
        pings = int(w1.info("commandstats")["cmdstat_ping"]["calls"])
    own = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for family in text_string_to_metric_families(text) for s in family.samples}
    assert own[("redis_commands_total", (("cmd", "ping"),))] == pings
    assert all("worker" not in dict(labels) for _, labels in own)


def test_pion_metrics_without_a_metrics_port_is_an_error_and_one_worker_has_no_worker_label(
        tmp_path: Path) -> None:
    server = start_server(tmp_path / "plain", "--binary-port", "0")
    try:
        with server.client() as r, pytest.raises(redis.ResponseError) as refused:
            r.execute_command("PION.METRICS")
        assert str(refused.value) == "metrics are off: start pion-server with --metrics-port"
    finally:
        server.stop()
    metrics_port = free_port()
    single = start_server(tmp_path / "one", "--binary-port", "0", "--metrics-port", str(metrics_port))
    try:
        with single.client() as r:
            r.ping()
        samples, names = scrape(metrics_port)
    finally:
        single.stop()
    assert "pion_worker_up" not in names
    assert all("worker" not in dict(labels) for _, labels in samples)
