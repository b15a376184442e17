"""``--appendonly no``: a real pion-server that serves writes, logs none and keeps nothing
across a restart but what SAVE/BGSAVE wrote (Redis with AOF off: its RDB file is loaded, the AOF
is not)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.procs import ServerProcess, start_server
from support.workers import start_workers


def _wal_files(data_dir: Path) -> list[str]:
    return sorted(p.name for p in data_dir.glob("pion.vstore.*.wal*"))


def _persistence(server: ServerProcess) -> tuple[int, int, str]:
    with server.client() as conn:
        info = conn.info("persistence")
        return info["aof_enabled"], info["wal_bytes"], conn.config_get("appendonly")["appendonly"]


def _wait_bgsave(server: ServerProcess) -> None:
    with server.client() as conn:
        deadline = time.monotonic() + 30
        while conn.info("persistence")["bgsave_in_progress"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
def test_writes_are_served_leave_no_wal_and_are_gone_after_a_restart(tmp_path: Path, sig: int) -> None:
    server = start_server(tmp_path, "--appendonly", "no")
    try:
        with server.client() as conn:
            assert conn.set("k", "v") is True
            assert conn.mset({"a": "1", "b": "2"}) is True
            conn.execute_command("V.CREATE", "s", 4)
            assert conn.execute_command("V.STOREBATCH", "s", 0, 0, b"\x00" * 16 * 3) == 3
            assert conn.mget("k", "a", "b") == [b"v", b"1", b"2"]
            assert conn.dbsize() == 3
        assert _persistence(server) == (0, 0, "no")
        assert _wal_files(tmp_path) == []
    finally:
        server.stop(sig)
    server = start_server(tmp_path, "--appendonly", "no")
    try:
        with server.client() as conn:
            assert (conn.dbsize(), conn.execute_command("V.LIST")) == (0, [])
        assert _wal_files(tmp_path) == []
    finally:
        server.stop()


def test_the_default_logs_writes_and_says_aof_enabled(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with server.client() as conn:
            conn.set("k", "v")
        aof, wal_bytes, appendonly = _persistence(server)
        assert (aof, wal_bytes > 0, appendonly) == (1, True, "yes")
    finally:
        server.stop()


def test_save_and_bgsave_still_write_a_snapshot_the_next_start_loads(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--appendonly", "no")
    try:
        with server.client() as conn:
            conn.set("saved", "1")
            assert conn.save() is True
            conn.set("bgsaved", "2")
            assert conn.bgsave() is True
        _wait_bgsave(server)
        with server.client() as conn:
            conn.set("after", "3")  # after the last snapshot: not kept
            assert conn.info("persistence")["last_bgsave_status"] == "ok"
        assert _wal_files(tmp_path) == []
    finally:
        server.kill9()
    server = start_server(tmp_path, "--appendonly", "no")
    try:
        with server.client() as conn:
            assert sorted(conn.keys("*")) == [b"bgsaved", b"saved"]
            assert conn.mget("saved", "bgsaved", "after") == [b"1", b"2", None]
    finally:
        server.stop()


def test_a_wal_from_an_appendonly_yes_run_is_not_replayed_and_a_save_replaces_it(tmp_path: Path) -> None:
    server = start_server(tmp_path)  # --appendonly yes: a snapshot, then more in the WAL
    try:
        with server.client() as conn:
            conn.set("in_snapshot", "old")
            assert conn.save() is True
            conn.set("in_snapshot", "newer")
            conn.set("only_in_wal", "x")
    finally:
        server.stop()
    wal_before = {p.name: p.read_bytes() for p in tmp_path.glob("pion.vstore.*.wal*")}
    assert list(wal_before) == ["pion.vstore.0.wal"]

    server = start_server(tmp_path, "--appendonly", "no")
    try:
        with server.client() as conn:  # the snapshot only, as Redis loads its RDB and not the AOF
            assert conn.mget("in_snapshot", "only_in_wal") == [b"old", None]
        assert {p.name: p.read_bytes() for p in tmp_path.glob("pion.vstore.*.wal*")} == wal_before
        assert "--appendonly no: not replaying" in server.log()
        with server.client() as conn:
            conn.set("written_without_wal", "y")
            assert conn.save() is True  # the live state, and the WAL files it supersedes go
        assert _wal_files(tmp_path) == []
    finally:
        server.stop()

    server = start_server(tmp_path)  # back to --appendonly yes: the snapshot, nothing stale
    try:
        with server.client() as conn:
            assert conn.mget("in_snapshot", "only_in_wal", "written_without_wal") == [b"old", None, b"y"]
            conn.set("logged_again", "z")
    finally:
        server.kill9()
    server = start_server(tmp_path)
    try:
        with server.client() as conn:
            assert conn.mget("written_without_wal", "logged_again") == [b"y", b"z"]
    finally:
        server.stop()


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--appendonly", "maybe"], {},
     "--appendonly: expected a boolean (yes/no, 1/0, true/false, on/off), got 'maybe'"),
    ([], {"PION_APPENDONLY": "sometimes"},
     "PION_APPENDONLY: expected a boolean (yes/no, 1/0, true/false, on/off), got 'sometimes'"),
])
def test_a_bad_appendonly_value_stops_the_start_with_a_clear_error(
        tmp_path: Path, args: list[str], env: dict[str, str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pion.server", "--port", "0", "--dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})
    assert (done.returncode, message in done.stderr) == (2, True), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_two_workers_serve_writes_without_a_wal_and_forget_them_at_restart(tmp_path: Path) -> None:
    group = start_workers(tmp_path, 2, "--appendonly", "no")
    try:
        for index in (0, 1):
            with group.worker(index) as conn:
                conn.execute_command("V.CREATE", f"w{index}", 4)
                assert conn.execute_command("V.STOREBATCH", f"w{index}", 0, 0, b"\x00" * 16) == 1
                assert conn.set(f"k{index}", "v") is True
                info = conn.info("persistence")
                assert (info["aof_enabled"], info["wal_bytes"]) == (0, 0)
        with group.server.client() as conn:
            assert sorted(conn.execute_command("V.LIST")) == [b"w0", b"w1"]
            assert conn.mget("k0", "k1") == [b"v", b"v"]
        assert _wal_files(tmp_path) == []
    finally:
        group.server.stop()
    group = start_workers(tmp_path, 2, "--appendonly", "no")
    try:
        with group.server.client() as conn:
            assert (conn.execute_command("V.LIST"), conn.mget("k0", "k1")) == ([], [None, None])
        assert _wal_files(tmp_path) == []
    finally:
        group.server.stop()
