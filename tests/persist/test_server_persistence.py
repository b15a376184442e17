"""A real pion-server keeps its data across restarts: WAL replay, snapshots, repair, MISCONF."""

from __future__ import annotations

import resource
import signal
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from support.procs import ServerProcess, start_server


def _rows(n: int, kv_dim: int, seed: int) -> bytes:
    return np.random.default_rng(seed).standard_normal((n, kv_dim)).astype("<f4").tobytes()


def _fill(server: ServerProcess) -> dict[str, object]:
    """Sessions, a prefix with BLOCKS/LAYERS/PREFILL_MS, keys with and without TTL, a drop."""
    r = server.client()
    r.execute_command("V.CREATE", "plain", 8)
    r.execute_command("V.STOREBATCH", "plain", 0, 0, _rows(5, 8, 1))
    r.execute_command("V.STOREBATCH", "plain", 1, 0, _rows(3, 8, 2))
    r.execute_command("V.STOREBATCH", "plain", 0, 2, _rows(4, 8, 3))  # overwrite + grow
    r.execute_command("V.CREATE", "q", 32, "VQUANT", "fp16")
    r.execute_command("V.STOREBATCH", "q", 0, 0, _rows(7, 32, 4))
    r.execute_command("V.CREATE", "gone", 8)
    r.execute_command("V.STOREBATCH", "gone", 0, 0, _rows(2, 8, 5))
    assert r.execute_command("V.DROP", "gone") == 1
    hashes = struct.pack("<3Q", 11, 22, 33)
    r.execute_command("KV.PREFIX.REGISTER", "ns", 8, "fp16", "BLOCKS", 64, 3, hashes, "LAYERS", 2,
                      "PREFILL_MS", 5000)
    for side in ("ns_pk", "ns_pv"):
        for layer in range(2):
            r.execute_command("V.STOREBATCH", side, layer, 0, _rows(4, 8, 10 + layer))
    r.execute_command("KV.PREFIX.REGISTER", "dropped", 8, "fp16")
    assert r.execute_command("KV.PREFIX.DROP", "dropped") == 1
    r.set("k1", b"\x00binary\xff" * 100)
    r.set("ttl", "lives", ex=3600)
    r.set("short", "dies", px=1)
    r.set("deleted", "x")
    r.delete("deleted")
    return _snapshot_of(server)


def _snapshot_of(server: ServerProcess) -> dict[str, object]:
    """Everything a client can read back, bit for bit."""
    r = server.client()
    state: dict[str, object] = {
        "plain0": r.execute_command("V.FETCH", "plain", 0, "RANGE", 0, 6),
        "plain1": r.execute_command("V.FETCH", "plain", 1, "RANGE", 0, 3),
        "q": r.execute_command("V.FETCH", "q", 0, "RANGE", 0, 7, "DTYPE", "raw"),
        "ns_k1": r.execute_command("V.FETCH", "ns_pk", 1, "RANGE", 0, 4, "DTYPE", "raw"),
        "list": sorted(r.execute_command("V.LIST")),
        "blocks": r.execute_command("KV.PREFIX.BLOCKS", "ns"),
        "dropped_blocks": r.execute_command("KV.PREFIX.BLOCKS", "dropped"),
        "keys": sorted(r.keys("*")),
        "k1": r.get("k1"),
        "ttl": r.get("ttl"),
    }
    ttl = r.ttl("ttl")
    assert 3500 < ttl <= 3600
    return state


def _restart(server: ServerProcess, sig: int = signal.SIGTERM, *args: str) -> ServerProcess:
    server.stop(sig)
    return start_server(server.data_dir, *(args or tuple(server.extra_args)))


def _stats(server: ServerProcess) -> dict[bytes, bytes]:
    flat = server.client().execute_command("PION.STATS")
    return dict(zip(flat[::2], flat[1::2], strict=True))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
def test_everything_acknowledged_survives_a_restart_through_wal_replay(tmp_path: Path, sig: int) -> None:
    server = start_server(tmp_path / "data")
    try:
        before = _fill(server)
        assert before["list"] == [b"ns_pk", b"ns_pv", b"plain", b"q"]
        server = _restart(server, sig)
        assert _snapshot_of(server) == before
        r = server.client()
        assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
        assert r.execute_command("KV.PREFIX.MEMBERSHIP", "ns", 2, struct.pack("<2Q", 22, 99)) == b"\x01"
    finally:
        server.stop()


def test_blocks_and_layers_survive_a_snapshot_reload_and_prefill_ms_does_not(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--prefill-us-per-token", "1000")
    try:
        before = _fill(server)
        r = server.client()
        assert r.execute_command("KV.PREFIX.SAVE") == b"OK"
        info = r.execute_command("KV.PREFIX.INFO").decode()
        assert "wal_bytes:0\r\n" in info
        server = _restart(server)
        assert _snapshot_of(server) == before
        r = server.client()
        # LAYERS 2 survived: a half-written prefix (layer 1 short on one side) is not a HIT.
        r.execute_command("V.STOREBATCH", "ns_pv", 1, 4, _rows(1, 8, 99))
        assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"
        r.execute_command("V.STOREBATCH", "ns_pk", 1, 4, _rows(1, 8, 98))
        r.execute_command("V.STOREBATCH", "ns_pk", 0, 4, _rows(1, 8, 97))
        r.execute_command("V.STOREBATCH", "ns_pv", 0, 4, _rows(1, 8, 96))
        r.execute_command("PION.STATS", "RESET")
        assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
        stats = _stats(server)
        # PREFILL_MS 5000 was not persisted: the hit is credited 5 tokens x 1000 us, estimated.
        assert float(stats[b"prefill_seconds_avoided_measured"]) == 0.0
        assert float(stats[b"prefill_seconds_avoided_estimated"]) == pytest.approx(0.005)
    finally:
        server.stop()


def test_writes_after_a_snapshot_replay_on_top_of_it(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        _fill(server)
        r = server.client()
        assert r.execute_command("SAVE") is True  # redis-py parses +OK of SAVE
        r.execute_command("V.STOREBATCH", "plain", 0, 6, _rows(2, 8, 50))
        r.execute_command("V.DROP", "q")
        r.execute_command("KV.PREFIX.DROP", "ns")
        r.set("k1", "new")
        expected = {"plain0": r.execute_command("V.FETCH", "plain", 0, "RANGE", 0, 8),
                    "list": sorted(r.execute_command("V.LIST")), "k1": r.get("k1")}
        server = _restart(server, signal.SIGKILL)
        r = server.client()
        assert {"plain0": r.execute_command("V.FETCH", "plain", 0, "RANGE", 0, 8),
                "list": sorted(r.execute_command("V.LIST")), "k1": r.get("k1")} == expected
        assert r.execute_command("KV.PREFIX.BLOCKS", "ns") == b"UNKNOWN"
    finally:
        server.stop()


def test_evicted_sessions_stay_evicted_after_a_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--max-sessions", "2")
    try:
        r = server.client()
        for sid in ("a", "b", "c"):
            r.execute_command("V.CREATE", sid, 8)
            r.execute_command("V.STOREBATCH", sid, 0, 0, _rows(1, 8, 1))
        assert sorted(r.execute_command("V.LIST")) == [b"b", b"c"]
        server = _restart(server, signal.SIGKILL)
        assert sorted(server.client().execute_command("V.LIST")) == [b"b", b"c"]
    finally:
        server.stop()


def test_appendfsync_always_replies_after_fsync_and_group_commits(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        r = server.client()
        r.execute_command("V.CREATE", "s", 16)
        for i in range(20):
            r.execute_command("V.STOREBATCH", "s", 0, i, _rows(1, 16, i))
        info = r.info("persistence")
        assert info["appendfsync"] == "always"
        assert info["wal_synced_seq"] == info["wal_last_seq"] == 21
        assert info["wal_fsyncs"] >= 1
        before = r.execute_command("V.FETCH", "s", 0, "RANGE", 0, 20)
        server = _restart(server, signal.SIGKILL)
        assert server.client().execute_command("V.FETCH", "s", 0, "RANGE", 0, 20) == before
    finally:
        server.stop()


def test_a_damaged_wal_refuses_to_start_and_wal_repair_starts_with_a_prefix(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data)
    try:
        r = server.client()
        for i in range(10):
            r.set(f"k{i}", f"v{i}" * 50)
    finally:
        server.stop()
    wal = data / "pion.vstore.0.wal"
    raw = bytearray(wal.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    wal.write_bytes(bytes(raw))
    with pytest.raises(RuntimeError, match=r"pion\.vstore\.0\.wal is damaged at offset \d+.*--wal-repair"):
        start_server(data)
    server = start_server(data, "--wal-repair")
    try:
        keys = sorted(server.client().keys("*"))
        assert 0 < len(keys) < 10
        assert keys == sorted(f"k{i}".encode() for i in range(len(keys)))
        assert "--wal-repair" in server.log()
    finally:
        server.stop()


def test_save_refuses_bad_paths_and_arguments(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        r = server.client()
        r.set("k", "v")
        with pytest.raises(redis.ResponseError, match="inside --dir"):
            r.execute_command("KV.PREFIX.SAVE", "../outside")
        with pytest.raises(redis.ResponseError, match="at most one path"):
            r.execute_command("KV.PREFIX.SAVE", "a", "b")
        with pytest.raises(redis.ResponseError, match="contains a NUL byte"):
            r.execute_command("KV.PREFIX.SAVE", b"a\x00b")
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            r.execute_command("SAVE", "x")
        assert r.execute_command("KV.PREFIX.SAVE", "backup.snap") == b"OK"
        assert (tmp_path / "data" / "backup.snap").stat().st_size > 0
        assert (tmp_path / "data" / "pion.vstore.0.wal").stat().st_size > 0  # a copy keeps the WAL
        assert r.execute_command("KV.PREFIX.SAVE") == b"OK"  # the default path, pion.vstore.<worker>
        assert (tmp_path / "data" / "pion.vstore.0").stat().st_size > 0
        assert (tmp_path / "data" / "pion.vstore.0.wal").stat().st_size == 0
        assert r.lastsave().timestamp() > 0
    finally:
        server.stop()


def _file_limit(max_bytes: int):  # type: ignore[no-untyped-def]
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return limit


def test_a_full_disk_gives_misconf_keeps_reads_and_resumes_after_save_frees_space(tmp_path: Path) -> None:
    limit = 2 * 1024**2
    server = start_server(tmp_path / "data", "--loglevel", "warning", preexec_fn=_file_limit(limit))
    try:
        r = server.client()
        value = np.random.default_rng(0).bytes(64 * 1024)
        acked = 0
        error = None
        for i in range(100):
            try:
                r.set("big", value + bytes([i]))  # one key rewritten: the data stays 64 KB
                acked += 1
            except redis.ResponseError as e:
                error = str(e)
                break
        assert error is not None and error.startswith("MISCONF Errors writing to the WAL")
        with pytest.raises(redis.ResponseError, match="^MISCONF Errors writing"):  # retried, fails again
            r.set("big", b"refused" * 10000)
        assert r.get("big") == value + bytes([acked - 1])  # reads keep working
        assert r.info("persistence")["wal_last_write_status"] == "err"
        wal_size = (tmp_path / "data" / "pion.vstore.0.wal").stat().st_size
        assert wal_size <= limit
        assert r.execute_command("SAVE") is True  # redis-py parses +OK of SAVE  # a 64 KB snapshot; the WAL is emptied
        assert r.set("after", "resumed") is True
        assert r.info("persistence")["wal_last_write_status"] == "ok"
        server = _restart(server, signal.SIGKILL)
        r = server.client()
        assert r.get("big") == value + bytes([acked - 1])
        assert r.get("after") == b"resumed"
    finally:
        server.stop()


def _all_rows(server: ServerProcess) -> dict[bytes, bytes]:
    r = server.client()
    out = {}
    for sid in r.execute_command("V.LIST"):
        info = r.execute_command("V.INFO", sid)
        rows = dict(zip(info[::2], info[1::2], strict=True))[b"tokens"]
        out[sid] = r.execute_command("V.FETCH", sid, 0, "RANGE", 0, rows, "DTYPE", "raw")
    return out


def test_bgsave_while_clients_write_restarts_to_exactly_the_final_state(tmp_path: Path) -> None:
    import threading
    server = start_server(tmp_path / "data")
    try:
        r = server.client()
        for i in range(16):
            r.execute_command("V.CREATE", f"s{i}", 1024, "VQUANT", "fp16")
            r.execute_command("V.STOREBATCH", f"s{i}", 0, 0, _rows(512, 1024, i))  # 1 MB each
        stop = threading.Event()

        def writer() -> None:
            conn = server.client()
            i = 0
            while not stop.is_set():
                sid = f"s{i % 16}"
                if i % 37 == 36:
                    conn.execute_command("V.DROP", sid)
                    conn.execute_command("V.CREATE", sid, 1024, "VQUANT", "fp16")
                conn.execute_command("V.STOREBATCH", sid, 0, 0, _rows(64, 1024, 1000 + i))
                i += 1

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            assert r.execute_command("BGSAVE") in (b"Background saving started", True)
            while r.info("persistence")["bgsave_in_progress"]:
                pass
        finally:
            stop.set()
            thread.join()
        assert r.info("persistence")["last_bgsave_status"] == "ok"
        before = _all_rows(server)
        server = _restart(server, signal.SIGKILL)
        assert _all_rows(server) == before
    finally:
        server.stop()


def test_the_wal_passing_wal_max_bytes_starts_a_snapshot_by_itself(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--wal-max-bytes", "300kb")
    try:
        r = server.client()
        for i in range(20):
            r.set("k", bytes([i]) * 50_000)
        deadline = time.monotonic() + 20
        while r.info("persistence")["saves"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)  # the snapshot runs in the background
        info = r.info("persistence")
        assert info["saves"] >= 1
        assert info["wal_bytes"] < 20 * 50_000
        server = _restart(server, signal.SIGKILL)
        assert server.client().get("k") == bytes([19]) * 50_000
    finally:
        server.stop()
