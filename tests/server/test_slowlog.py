"""SLOWLOG against a real pion-server, read with redis-py's slowlog_get/slowlog_len/slowlog_reset."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.procs import ServerProcess, start_server
from support.replies import err


@pytest.fixture
def record_all(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server that keeps every command (threshold 0) in a 4-entry ring."""
    server = start_server(tmp_path / "d", "--slowlog-log-slower-than", "0", "--slowlog-max-len", "4")
    try:
        yield server
    finally:
        server.stop()


def test_slowlog_get_returns_redis_entries_newest_first_with_addr_and_name(record_all: ServerProcess) -> None:
    with record_all.client() as r:
        r.client_setname("tester")
        r.slowlog_reset()
        r.set("k1", "v1")
        r.get("k1")
        entries = r.slowlog_get()
        addr = r.client_info()["addr"]
    assert [e["command"] for e in entries] == [b"GET k1", b"SET k1 v1", b"SLOWLOG RESET"]
    assert [e["client_address"] for e in entries] == [addr.encode()] * 3
    assert [e["client_name"] for e in entries] == [b"tester"] * 3
    assert entries[0]["id"] == entries[1]["id"] + 1 == entries[2]["id"] + 2
    assert all(abs(e["start_time"] - time.time()) < 60 for e in entries) is True
    assert all(isinstance(e["duration"], int) and e["duration"] >= 0 for e in entries) is True


def test_slowlog_len_counts_entries_and_the_ring_keeps_only_the_newest_max_len(record_all: ServerProcess) -> None:
    with record_all.client() as r:
        r.slowlog_reset()
        for i in range(6):
            r.set(f"ring{i}", i)
        assert r.slowlog_len() == 4
        assert [e["command"] for e in r.slowlog_get(-1)] == [b"SLOWLOG LEN", b"SET ring5 5", b"SET ring4 4",
                                                               b"SET ring3 3"]
        assert [e["command"] for e in r.slowlog_get(2)] == [b"SLOWLOG GET -1", b"SLOWLOG LEN"]


def test_slowlog_reset_empties_the_ring_and_ids_keep_growing(record_all: ServerProcess) -> None:
    with record_all.client() as r:
        r.ping()
        last_id = r.slowlog_get(1)[0]["id"]
        assert r.slowlog_reset() is True
        first_after = r.slowlog_get(1)[0]
    assert first_after["command"] == b"SLOWLOG RESET"
    assert first_after["id"] == last_id + 2  # the SLOWLOG GET in between took id last_id + 1


def test_long_arguments_are_cut_like_redis_and_passwords_are_redacted(record_all: ServerProcess) -> None:
    with record_all.client() as r:
        r.execute_command("ECHO", "x" * 200)
        r.execute_command("MSET", *[f"m{i}" for i in range(40)])
        # No password is configured, so the default user accepts any (as in Redis).
        assert r.execute_command("AUTH", "default", "s3cret") == True  # redis-py's reply is a bool
        raw = r.execute_command("SLOWLOG", "GET", "3")
    auth_args, mset_args, echo_args = raw[0][3], raw[1][3], raw[2][3]
    assert auth_args == [b"AUTH", b"(redacted)", b"(redacted)"]
    assert len(mset_args) == 32
    assert mset_args[:31] == [b"MSET", *[f"m{i}".encode() for i in range(30)]]
    assert mset_args[31] == b"... (10 more arguments)"
    assert echo_args == [b"ECHO", b"x" * 128 + b"... (72 more bytes)"]
    assert [len(entry) for entry in raw] == [6, 6, 6]


def test_default_threshold_keeps_fast_commands_out_and_nothing_reaches_the_log(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d")
    try:
        with server.client() as r:
            for i in range(20):
                r.set(f"fast{i}", i)
            assert r.slowlog_len() == 0
            assert r.config_get("slowlog-*") == {"slowlog-log-slower-than": "10000", "slowlog-max-len": "128"}
    finally:
        server.stop()
    assert "slow command" not in server.log()


def test_negative_threshold_disables_the_slowlog(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d", "--slowlog-log-slower-than", "-1")
    try:
        with server.client() as r:
            r.set("a", "b")
            r.get("a")
            assert r.slowlog_len() == 0
            assert r.slowlog_get() == []
            assert r.config_get("slowlog-log-slower-than") == {"slowlog-log-slower-than": "-1"}
    finally:
        server.stop()


@pytest.mark.parametrize("args, message", [
    (["SLOWLOG", "GET", "x"], "value is not an integer or out of range"),
    (["SLOWLOG", "GET", "-2"], "count should be greater than or equal to -1"),
    (["SLOWLOG", "GET", "1", "2"], "wrong number of arguments for 'slowlog|get' command"),
    (["SLOWLOG", "LEN", "1"], "wrong number of arguments for 'slowlog|len' command"),
    (["SLOWLOG", "RESET", "now"], "wrong number of arguments for 'slowlog|reset' command"),
    (["SLOWLOG", "NOPE"], "unknown subcommand 'NOPE'. Try SLOWLOG HELP."),
    (["SLOWLOG"], "wrong number of arguments for 'slowlog' command"),
])
def test_bad_slowlog_calls_are_refused_and_change_nothing(record_all: ServerProcess, args: list[str],
                                                          message: str) -> None:
    with record_all.client() as r:
        r.set("keep", "1")
        before = r.slowlog_get(-1)
        assert err(r, *args) == message
        after = r.slowlog_get(-1)
    # The refused call is timed and recorded like any call; the entries before it are unchanged.
    assert [e["command"] for e in after[:3]] == [" ".join(args).encode(), b"SLOWLOG GET -1", b"SET keep 1"]
    assert after[2]["id"] == before[0]["id"]


def test_slowlog_help_lists_the_subcommands(record_all: ServerProcess) -> None:
    with record_all.client() as r:
        lines = r.execute_command("SLOWLOG", "HELP")
    assert [line for line in lines if not line.startswith(b"  ")][1:] == [b"GET [<count>]", b"LEN", b"RESET", b"HELP"]


@pytest.mark.slow
def test_the_embedding_model_load_is_not_counted_as_the_first_commands_duration(record_all: ServerProcess) -> None:
    with record_all.client() as r:
        r.slowlog_reset()
        started = time.perf_counter()
        r.execute_command("AI.EMBED", "hello there")
        wall_us = (time.perf_counter() - started) * 1e6
        entry = r.slowlog_get(1)[0]
        load_ms = float(r.info("semantic")["embedder_load_ms"])
    assert entry["command"] == b"AI.EMBED hello there"
    assert load_ms > 0.0
    # The server-side duration fits in the client's wall time only with the load taken out.
    assert entry["duration"] + load_ms * 1000.0 <= wall_us
