"""pion-server -w 2 as processes: start-up, SIGTERM, a worker killed and restarted with its WAL,
restart with the same or another worker count, --independent-workers, hash placement, AUTH."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import redis

from support.proc_tree import alive, children_of
from support.procs import start_server
from support.replies import err
from support.workers import WorkerGroup, start_workers, worker_info

D = 8


def rows(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32).tobytes()


def wait_for_worker(group: WorkerGroup, index: int, not_pid: int, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with group.worker(index) as conn:
                pid = int(worker_info(conn)["pid"])
                if pid != not_pid:
                    return pid
        except redis.ConnectionError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"worker {index} did not come back:\n{group.server.log()}")


def test_one_worker_is_one_process_as_before(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d")
    try:
        with server.client() as conn:
            info = worker_info(conn)
        assert (info["id"], info["workers"], info["mode"], info["pid"]) == (0, 1, "single", server.proc.pid)
        assert children_of(server.proc.pid) == []
        assert not (tmp_path / "d" / "pion.workers").exists()
    finally:
        server.stop()


def test_two_workers_are_two_children_with_prefixed_logs_and_sigterm_stops_all(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "d", 2)
    pids = group.pids()
    assert sorted(children_of(group.server.proc.pid)) == sorted(pids)
    assert group.server.stop() == 0
    log = group.server.log()
    assert ("[w0] INFO pion.server: worker 0 of 2 ready" in log, "[w1] INFO pion.server: worker 1 of 2 ready" in log,
            "[w1] INFO pion.server: pion-server stopped cleanly" in log) == (True, True, True)
    assert [alive(pid) for pid in pids] == [False, False]


def test_a_killed_worker_is_restarted_with_its_wal_and_the_other_keeps_serving(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "d", 2, "--appendfsync", "always")
    try:
        with group.worker(1) as w1:
            w1.execute_command("KV.PREFIX.REGISTER", "crash|a", D, "fp32", "LAYERS", 1)
            w1.execute_command("V.STOREBATCH", "crash|a_pk", 0, 0, rows(5, 1))
            w1.execute_command("V.STOREBATCH", "crash|a_pv", 0, 0, rows(5, 2))
            old_pid = int(worker_info(w1)["pid"])
        w0 = group.worker(0)
        w0.set("k", "v")
        os.kill(old_pid, signal.SIGKILL)
        assert w0.get("k") == b"v"  # worker 0's connection never noticed
        new_pid = wait_for_worker(group, 1, old_pid)
        assert new_pid != old_pid
        with group.worker(1) as w1:
            assert w1.execute_command("V.FETCH", "crash|a_pk", 0, "RANGE", 0, 5) == rows(5, 1)
        assert w0.execute_command("KV.PREFIX.LOOKUP", "crash|a") == b"HIT"
        assert err(w0, "V.FETCH", "crash|a_pv", 0, "RANGE", 0, 5) == (
            f"V.FETCH session lives on worker 1 127.0.0.1:{group.ports[1]}")
        assert "worker 1 (pid %d) exited with -9; restarting it" % old_pid in group.server.log()
        w0.close()
    finally:
        group.server.stop()


def test_a_restart_with_the_same_worker_count_recovers_every_worker(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "d", 2)
    with group.worker(0) as w0, group.worker(1) as w1:
        w0.execute_command("V.CREATE", "on0", D)
        w0.execute_command("V.STOREBATCH", "on0", 0, 0, rows(2, 3))
        w1.execute_command("V.CREATE", "on1", D)
        w1.execute_command("V.STOREBATCH", "on1", 0, 0, rows(3, 4))
        w1.set("key", "kept")
    assert group.server.stop() == 0
    again = start_workers(tmp_path / "d", 2)
    try:
        with again.worker(0) as w0, again.worker(1) as w1:
            assert w0.execute_command("V.FETCH", "on0", 0, "RANGE", 0, 2) == rows(2, 3)
            assert w1.execute_command("V.FETCH", "on1", 0, "RANGE", 0, 3) == rows(3, 4)
            assert err(w0, "V.INFO", "on1") == f"V.INFO session lives on worker 1 127.0.0.1:{again.ports[1]}"
            assert (w0.get("key"), w1.get("key")) == (b"kept", b"kept")
    finally:
        again.server.stop()


def test_another_worker_count_is_refused_with_the_reason(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "d", 2)
    assert group.server.stop() == 0
    for workers in ("3", "1"):
        done = subprocess.run([sys.executable, "-m", "pion.server", "--port", "0", "--dir", str(tmp_path / "d"),
                               "-w", workers, "--worker-port-base", "0"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1
        assert (f"holds the data of 2 workers (pion.workers) but this server was started with -w {workers}: "
                "start it with -w 2") in done.stderr


def test_independent_workers_are_separate_stores(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "d", 2, "--independent-workers")
    try:
        with group.worker(0) as w0, group.worker(1) as w1:
            assert worker_info(w1)["mode"] == "independent"
            w0.execute_command("V.CREATE", "only0", D)
            w0.set("key", "on0")
            assert w1.execute_command("V.LIST") == []
            assert w1.get("key") is None
            assert err(w1, "V.INFO", "only0") == "session 'only0' not found"
            assert w1.execute_command("V.CREATE", "only0", D) == b"OK"  # its own, separate session
    finally:
        group.server.stop()


def test_hash_placement_sends_a_creation_to_the_home_worker(tmp_path: Path) -> None:
    import zlib

    group = start_workers(tmp_path / "d", 2, "--worker-placement", "hash")
    try:
        names = [f"h{i}" for i in range(6)]
        homes = [zlib.crc32(n.encode()) % 2 for n in names]
        with group.worker(0) as w0:
            replies = []
            for n, home in zip(names, homes, strict=True):
                if home == 0:
                    replies.append(w0.execute_command("V.CREATE", n, D))
                else:
                    replies.append(err(w0, "V.CREATE", n, D))
        assert replies == [b"OK" if home == 0 else f"V.CREATE session lives on worker 1 127.0.0.1:{group.ports[1]}"
                           for home in homes]
    finally:
        group.server.stop()


def test_forwarding_and_fan_out_authenticate_between_workers(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "d", 2, password="s3cret")
    try:
        with group.worker(1) as w1, group.worker(0) as w0:
            assert w1.set("a", "1") is True
            assert w0.get("a") == b"1"
            w0.execute_command("V.CREATE", "p0", D)
            assert w1.execute_command("V.LIST") == [b"p0"]
            assert w1.execute_command("V.DROP", "p0") == 1
        with socket.create_connection(("127.0.0.1", group.ports[1]), timeout=10) as sock:
            sock.sendall(b"GET a\r\n")
            assert sock.recv(100) == b"-NOAUTH Authentication required.\r\n"
    finally:
        group.server.stop()


def test_a_full_directory_refuses_new_names_and_flushall_empties_every_worker(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "d", 2, "--directory-slots", "64")
    try:
        with group.worker(0) as w0, group.worker(1) as w1:
            for i in range(64):
                (w0 if i % 2 else w1).execute_command("V.CREATE", f"s{i}", D)
            assert err(w1, "V.CREATE", "one-more", D) == (
                "the cross-worker directory is full (64 slots; raise --directory-slots)")
            assert b"one-more" not in w0.execute_command("V.LIST")
            w1.set("key", "v")
            assert w1.flushall() is True
            assert (w0.execute_command("V.LIST"), w1.execute_command("V.LIST"), w0.dbsize()) == ([], [], 0)
            assert w1.execute_command("V.CREATE", "one-more", D) == b"OK"
    finally:
        group.server.stop()


def test_keyspace_commands_through_worker_1_survive_a_restart_of_worker_0(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "d", 2, "--appendfsync", "always")
    try:
        with group.worker(1) as w1:
            assert w1.set("before", "1") is True
            old_pid = group.pids()[0]
            os.kill(old_pid, signal.SIGKILL)
            wait_for_worker(group, 0, old_pid)
            deadline = time.monotonic() + 20
            while True:  # the shared link reconnects on the first command after the failure
                try:
                    value = w1.get("before")
                    break
                except redis.ResponseError as exc:
                    assert "the keyspace lives on worker 0, which did not answer" in str(exc)
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert value == b"1"
            assert w1.set("after", "2") is True
        with group.worker(0) as w0:
            assert w0.mget("before", "after") == [b"1", b"2"]
    finally:
        group.server.stop()
