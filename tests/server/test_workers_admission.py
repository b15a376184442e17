"""--admission 2hit under ``pion-server -w 2``: the workers share one ghost list (shared memory,
``workers/ghosts.py``), so a namespace registered once through worker 0 and once through worker 1
is admitted on the second, the window bounds the group's list (the ring of the last N deferrals),
and FLUSHALL through any worker empties it. Plus the ring itself, without a server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pion.server.workers.ghosts import SharedGhosts
from support.workers import WorkerGroup, start_workers


def prefix_info(r: redis.Redis) -> dict[str, int]:
    text = r.execute_command("KV.PREFIX.INFO").decode()
    return {k: int(v) for k, v in (line.split(":") for line in text.split("\r\n") if line)}


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGroup]:
    started = start_workers(tmp_path_factory.mktemp("wadm"), 2, "--admission", "2hit", "--admission-window", "2")
    try:
        yield started
    finally:
        started.server.stop()


@pytest.fixture
def workers(group: WorkerGroup) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    w0, w1 = group.worker(0), group.worker(1)
    w0.flushall()  # every worker: the ghost list is emptied too
    try:
        yield w0, w1
    finally:
        w0.close()
        w1.close()


def register(conn: redis.Redis, ns: str) -> bytes:
    return bytes(conn.execute_command("KV.PREFIX.REGISTER", ns, "4", "fp16"))


def test_a_namespace_seen_once_on_worker_0_and_once_on_worker_1_is_admitted(
        workers: tuple[redis.Redis, redis.Redis]) -> None:
    w0, w1 = workers
    assert register(w0, "adm|x") == b"DEFERRED"
    assert (prefix_info(w0)["admission_ghost_entries"], prefix_info(w1)["admission_ghost_entries"]) == (1, 1)
    assert register(w1, "adm|x") == b"OK"  # the second sight, on the other worker
    assert w0.execute_command("KV.PREFIX.LOOKUP", "adm|x") == b"HIT"  # on worker 1: worker 0 reads the directory
    info0, info1 = prefix_info(w0), prefix_info(w1)
    assert (info0["admission_ghost_entries"], info1["admission_ghost_entries"]) == (0, 0)
    assert ((info0["admission_deferred"], info0["admission_admitted"]),
            (info1["admission_deferred"], info1["admission_admitted"])) == ((1, 0), (0, 1))  # per worker
    assert info1["registered_prefixes"] == 1


def test_the_window_bounds_the_groups_list_and_forgets_the_oldest_deferral(
        workers: tuple[redis.Redis, redis.Redis]) -> None:
    w0, w1 = workers
    before = prefix_info(w0)["admission_ghost_evictions"]
    assert [register(w0, "win|1"), register(w1, "win|2"), register(w0, "win|3")] == [b"DEFERRED"] * 3
    assert register(w1, "win|1") == b"DEFERRED"  # window 2: win|1 was forgotten when win|3 came (win|2 goes now)
    assert register(w1, "win|3") == b"OK"
    info0, info1 = prefix_info(w0), prefix_info(w1)
    assert (info0["admission_ghost_entries"], info0["admission_ghost_evictions"] - before) == (1, 2)
    assert (info1["admission_ghost_entries"], info1["admission_ghost_evictions"]) == (
        info0["admission_ghost_entries"], info0["admission_ghost_evictions"])  # one list: the same figures


def test_flushall_through_worker_1_empties_the_shared_list(workers: tuple[redis.Redis, redis.Redis]) -> None:
    w0, w1 = workers
    assert register(w0, "fl|a") == b"DEFERRED"
    assert w1.flushall() is True
    assert prefix_info(w0)["admission_ghost_entries"] == 0
    assert register(w1, "fl|a") == b"DEFERRED"  # forgotten: a first sight again


def test_the_ring_remembers_the_last_window_deferrals_and_counts_what_it_forgets(tmp_path: Path) -> None:
    ring = SharedGhosts.create(3, tmp_path)
    try:
        assert [ring.sight(ns) for ns in ("a", "b", "a", "c")] == [True, True, False, True]
        assert (ring.entries, ring.evictions) == (3, 0)
        ring.admitted("b")
        assert (ring.entries, ring.evictions) == (2, 0)
        assert ring.sight("d") is True  # slot 0 (a's, the oldest deferral) is reused: a is forgotten
        assert (ring.entries, ring.evictions) == (2, 1)
        assert [ring.sight("a"), ring.sight("c"), ring.sight("d")] == [True, False, False]
        ring.clear()
        assert (ring.entries, ring.evictions, ring.sight("c")) == (0, 1, True)
    finally:
        ring.destroy()


def test_a_ring_with_an_empty_window_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as raised:
        SharedGhosts.create(0, tmp_path)
    assert str(raised.value) == "admission window must be >= 1, got 0"
