"""SSM.PREFIX.* through a real pion-server with redis-py: round trips, bad input, eviction
together with the namespace's K/V sessions, restart recovery and large states."""

from __future__ import annotations

import itertools
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from support.procs import ServerProcess, start_server
from support.replies import err

_ids = itertools.count()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(request: pytest.FixtureRequest, shared_pion_server: ServerProcess) -> Iterator[redis.Redis]:
    with shared_pion_server.client(protocol=request.param) as client:
        yield client


def ns(tag: str = "ssm") -> str:
    return f"app|hybrid|{tag}|{next(_ids)}"


def blob(n_bytes: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n_bytes, dtype=np.uint8).tobytes()


def prefix_info(r: redis.Redis) -> dict[str, int]:
    text = r.execute_command("KV.PREFIX.INFO")
    text = text.decode() if isinstance(text, bytes) else text
    return {k: int(v) for k, v in (line.split(":") for line in text.split("\r\n") if line)}


def ssm_info(r: redis.Redis) -> dict[str, int]:
    return {k: v for k, v in prefix_info(r).items() if k.startswith("ssm_")}


def rows(n: int, dim: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32).tobytes()


def test_store_then_fetch_returns_the_same_bytes_and_overwrite_replaces_them(r: redis.Redis) -> None:
    name, state = ns(), blob(1 << 20, 1)
    assert r.execute_command("SSM.PREFIX.STORE", name, 0, state) == b"OK"
    assert r.execute_command("SSM.PREFIX.FETCH", name, 0) == state
    assert r.execute_command("SSM.PREFIX.STORE", name, 0, b"\x00\x01\x02") == b"OK"
    assert r.execute_command("SSM.PREFIX.FETCH", name, 0) == b"\x00\x01\x02"


def test_fetch_of_an_unknown_namespace_or_layer_is_nil(r: redis.Redis) -> None:
    name = ns()
    assert r.execute_command("SSM.PREFIX.FETCH", name, 0) is None
    r.execute_command("SSM.PREFIX.STORE", name, 2, b"state")
    assert r.execute_command("SSM.PREFIX.FETCH", name, 1) is None


def test_mfetch_returns_consecutive_layers_with_nil_for_gaps(r: redis.Redis) -> None:
    name = ns()
    for layer in (0, 1, 3):
        r.execute_command("SSM.PREFIX.STORE", name, layer, f"layer{layer}".encode())
    assert r.execute_command("SSM.PREFIX.MFETCH", name, 0, 5) == [b"layer0", b"layer1", None, b"layer3", None]
    assert r.execute_command("SSM.PREFIX.MFETCH", name, 1, 0) == []
    assert r.execute_command("SSM.PREFIX.MFETCH", ns(), 0, 2) == [None, None]


def test_drop_of_one_layer_keeps_the_others_and_drop_without_layer_removes_all(r: redis.Redis) -> None:
    name = ns()
    for layer in range(3):
        r.execute_command("SSM.PREFIX.STORE", name, layer, b"x" * (layer + 1))
    assert r.execute_command("SSM.PREFIX.DROP", name, 1) == b"OK"
    assert r.execute_command("SSM.PREFIX.MFETCH", name, 0, 3) == [b"x", None, b"xxx"]
    assert r.execute_command("SSM.PREFIX.DROP", name) == b"OK"
    assert r.execute_command("SSM.PREFIX.MFETCH", name, 0, 3) == [None, None, None]
    assert r.execute_command("SSM.PREFIX.DROP", name) == b"OK"  # dropping nothing is still +OK


@pytest.mark.parametrize("args, message", [
    (("SSM.PREFIX.STORE", "n", "x", b"s"), "value is not an integer or out of range (layer)"),
    (("SSM.PREFIX.STORE", "n", "-1", b"s"), "layer must be 0..4095, got -1"),
    (("SSM.PREFIX.STORE", "n", "4096", b"s"), "layer must be 0..4095, got 4096"),
    (("SSM.PREFIX.STORE", "n", "0", b""), "state_blob is empty"),
    (("SSM.PREFIX.STORE", "", "0", b"s"), "namespace must not be empty"),
    (("SSM.PREFIX.STORE", "n", "0"), "wrong number of arguments for 'ssm.prefix.store' command"),
    (("SSM.PREFIX.STORE", "n", "0", b"s", b"extra"),
     "wrong number of arguments for 'ssm.prefix.store' command"),
    (("SSM.PREFIX.FETCH", "n"), "wrong number of arguments for 'ssm.prefix.fetch' command"),
    (("SSM.PREFIX.FETCH", "n", "1.5"), "value is not an integer or out of range (layer)"),
    (("SSM.PREFIX.MFETCH", "n", "0", "4097"), "n must be 0..4096, got 4097"),
    (("SSM.PREFIX.MFETCH", "n", "4000", "100"), "n must be 0..96, got 100"),
    (("SSM.PREFIX.DROP", "n", "0", "1"), "wrong number of arguments for 'ssm.prefix.drop' command"),
    (("SSM.PREFIX.DROP", "n", "zz"), "value is not an integer or out of range (layer)"),
])
def test_bad_input_is_refused_with_the_reason_and_records_nothing(
        r: redis.Redis, args: tuple[object, ...], message: str) -> None:
    r.execute_command("SSM.PREFIX.STORE", "n", 0, b"kept")
    before = ssm_info(r)
    assert err(r, *args) == message
    assert ssm_info(r) == before
    assert r.execute_command("SSM.PREFIX.FETCH", "n", 0) == b"kept"


def test_kv_prefix_info_counts_state_namespaces_layers_and_bytes(pion_server: ServerProcess) -> None:
    r = pion_server.client()
    r.execute_command("SSM.PREFIX.STORE", "a", 0, b"x" * 100)
    r.execute_command("SSM.PREFIX.STORE", "a", 1, b"y" * 50)
    r.execute_command("SSM.PREFIX.STORE", "b", 0, b"z" * 10)
    r.execute_command("SSM.PREFIX.FETCH", "a", 0)
    r.execute_command("SSM.PREFIX.MFETCH", "a", 0, 3)
    assert ssm_info(r) == {"ssm_prefixes": 2, "ssm_layers": 3, "ssm_bytes": 160,
                           "ssm_total_fetches": 3, "ssm_evicted_prefixes": 0}


def test_dropping_the_kv_prefix_or_one_side_drops_its_state_too(r: redis.Redis) -> None:
    a, b = ns("kvdrop"), ns("vdrop")
    for name in (a, b):
        r.execute_command("KV.PREFIX.REGISTER", name, 8, "fp16")
        r.execute_command("SSM.PREFIX.STORE", name, 0, b"state")
    assert r.execute_command("KV.PREFIX.DROP", a) == 1
    assert r.execute_command("SSM.PREFIX.FETCH", a, 0) is None
    assert r.execute_command("V.DROP", b + "_pv") == 1
    assert r.execute_command("SSM.PREFIX.FETCH", b, 0) is None


def test_flushall_drops_every_state(pion_server: ServerProcess) -> None:
    r = pion_server.client()
    r.execute_command("SSM.PREFIX.STORE", "a", 0, b"x")
    r.flushall()
    assert r.execute_command("SSM.PREFIX.FETCH", "a", 0) is None
    assert ssm_info(r)["ssm_bytes"] == 0


def test_maxmemory_evicts_a_hybrid_prefix_kv_and_state_together(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", "1mb")
    try:
        r = server.client()
        r.execute_command("KV.PREFIX.REGISTER", "hybrid", 64, "fp32")
        for side in ("_pk", "_pv"):
            r.execute_command("V.STOREBATCH", "hybrid" + side, 0, 0, rows(1000, 64))  # 256000 bytes each
        r.execute_command("SSM.PREFIX.STORE", "hybrid", 0, blob(200_000))
        r.execute_command("SSM.PREFIX.STORE", "only_a", 0, blob(200_000))  # 912000 bytes used
        # Needs 88_000 more: the least recently used state-only namespace goes first.
        r.execute_command("SSM.PREFIX.STORE", "only_b", 0, blob(200_000))
        assert r.execute_command("SSM.PREFIX.FETCH", "only_a", 0) is None
        assert r.execute_command("KV.PREFIX.LOOKUP", "hybrid") == b"HIT"
        assert r.execute_command("SSM.PREFIX.FETCH", "hybrid", 0) == blob(200_000)
        # A K/V write needing room evicts the least recent K/V group: hybrid, with its state.
        r.execute_command("V.CREATE", "plain", 64)
        r.execute_command("V.STOREBATCH", "plain", 0, 0, rows(1000, 64))
        assert r.execute_command("KV.PREFIX.LOOKUP", "hybrid") == b"MISS"
        assert r.execute_command("SSM.PREFIX.FETCH", "hybrid", 0) is None
        info = prefix_info(r)
        assert (info["ssm_prefixes"], info["ssm_bytes"], info["ssm_evicted_prefixes"]) == (1, 200_000, 1)
        assert (info["vstore_bytes"], info["vstore_evicted_sessions"]) == (256_000, 2)
    finally:
        server.stop()


def test_a_state_larger_than_maxmemory_is_refused_with_oom_and_nothing_is_evicted(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", "1mb")
    try:
        r = server.client()
        r.execute_command("SSM.PREFIX.STORE", "kept", 0, blob(500_000))
        with pytest.raises(redis.exceptions.OutOfMemoryError) as exc:
            r.execute_command("SSM.PREFIX.STORE", "huge", 0, blob(2_000_000))
        assert str(exc.value) == "command not allowed when used memory > 'maxmemory'."
        assert r.execute_command("SSM.PREFIX.FETCH", "kept", 0) == blob(500_000)
        assert ssm_info(r)["ssm_evicted_prefixes"] == 0
    finally:
        server.stop()


def _restart(server: ServerProcess, sig: int) -> ServerProcess:
    server.stop(sig)
    return start_server(server.data_dir, *server.extra_args)


@pytest.mark.parametrize("save_first", [False, True], ids=["wal", "snapshot+wal"])
def test_state_survives_a_kill9_restart_exactly(tmp_path: Path, save_first: bool) -> None:
    server = start_server(tmp_path / "data")
    try:
        r = server.client()
        r.execute_command("KV.PREFIX.REGISTER", "h", 8, "fp16")
        for layer in range(4):
            r.execute_command("SSM.PREFIX.STORE", "h", layer, blob(5000 + layer, layer))
        r.execute_command("SSM.PREFIX.STORE", "gone", 0, b"dropped later")
        if save_first:
            r.execute_command("SAVE")
        r.execute_command("SSM.PREFIX.STORE", "h", 1, b"overwritten")
        r.execute_command("SSM.PREFIX.DROP", "h", 3)
        r.execute_command("SSM.PREFIX.DROP", "gone")
        r.execute_command("SSM.PREFIX.STORE", "pure", 0, blob(7000, 9))
        before = (r.execute_command("SSM.PREFIX.MFETCH", "h", 0, 4),
                  r.execute_command("SSM.PREFIX.MFETCH", "pure", 0, 1),
                  r.execute_command("SSM.PREFIX.FETCH", "gone", 0), ssm_info(r)["ssm_bytes"])
        assert before[0] == [blob(5000, 0), b"overwritten", blob(5002, 2), None]
        server = _restart(server, signal.SIGKILL)
        r = server.client()
        after = (r.execute_command("SSM.PREFIX.MFETCH", "h", 0, 4),
                 r.execute_command("SSM.PREFIX.MFETCH", "pure", 0, 1),
                 r.execute_command("SSM.PREFIX.FETCH", "gone", 0), ssm_info(r)["ssm_bytes"])
        assert after == before
        r.execute_command("SAVE")  # a snapshot of the recovered state reloads to the same state
        server = _restart(server, signal.SIGTERM)
        assert server.client().execute_command("SSM.PREFIX.MFETCH", "h", 0, 4) == before[0]
    finally:
        server.stop()


def test_evicted_and_kv_dropped_state_stays_gone_after_a_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", "1mb")
    try:
        r = server.client()
        r.execute_command("KV.PREFIX.REGISTER", "dropped", 8, "fp16")
        r.execute_command("SSM.PREFIX.STORE", "dropped", 0, b"state")
        r.execute_command("KV.PREFIX.DROP", "dropped")
        r.execute_command("SSM.PREFIX.STORE", "old", 0, blob(600_000))
        r.execute_command("SSM.PREFIX.STORE", "new", 0, blob(600_000, 1))  # evicts "old"
        server = _restart(server, signal.SIGKILL)
        r = server.client()
        assert r.execute_command("SSM.PREFIX.MFETCH", "dropped", 0, 1) == [None]
        assert r.execute_command("SSM.PREFIX.FETCH", "old", 0) is None
        assert r.execute_command("SSM.PREFIX.FETCH", "new", 0) == blob(600_000, 1)
    finally:
        server.stop()


def test_a_70_mb_state_round_trips_past_any_64_mb_buffer_and_survives_a_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        state = blob(70 * 1024**2, 3)
        r = server.client(socket_timeout=120)
        assert r.execute_command("SSM.PREFIX.STORE", "big", 0, state) == b"OK"
        assert r.execute_command("SSM.PREFIX.FETCH", "big", 0) == state
        server = _restart(server, signal.SIGKILL)
        assert server.client(socket_timeout=120).execute_command("SSM.PREFIX.FETCH", "big", 0) == state
    finally:
        server.stop()


def test_a_kv_write_evicts_state_only_namespaces_when_kv_groups_do_not_free_enough(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", "1mb")
    try:
        r = server.client()
        r.execute_command("SSM.PREFIX.STORE", "pure_old", 0, blob(300_000))
        r.execute_command("SSM.PREFIX.STORE", "pure_new", 0, blob(300_000, 1))
        r.execute_command("V.CREATE", "plain", 64)
        r.execute_command("V.STOREBATCH", "plain", 0, 0, rows(1000, 64))  # 256000: 856000 used
        r.execute_command("V.CREATE", "more", 64)
        # 512000 more: evicting "plain" is not enough, so the oldest state-only namespace goes too.
        r.execute_command("V.STOREBATCH", "more", 0, 0, rows(2000, 64))
        assert r.execute_command("V.LIST") == [b"more"]
        assert r.execute_command("SSM.PREFIX.FETCH", "pure_old", 0) is None
        assert r.execute_command("SSM.PREFIX.FETCH", "pure_new", 0) == blob(300_000, 1)
        info = prefix_info(r)
        assert (info["ssm_evicted_prefixes"], info["vstore_evicted_sessions"]) == (1, 1)
        server = _restart(server, signal.SIGKILL)  # the eviction was logged
        assert server.client().execute_command("SSM.PREFIX.MFETCH", "pure_old", 0, 1) == [None]
    finally:
        server.stop()


def test_registering_a_pure_ssm_prefix_never_evicts_its_own_state(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", "1mb", "--max-sessions", "2")
    try:
        r = server.client()
        r.execute_command("SSM.PREFIX.STORE", "older", 0, blob(400_000))
        r.execute_command("SSM.PREFIX.STORE", "mamba", 0, blob(600_000, 1))  # evicts "older"
        r.execute_command("V.CREATE", "a", 8)
        r.execute_command("V.STOREBATCH", "a", 0, 0, rows(1, 8))
        # Two session slots: REGISTER evicts "a"; the 600 KB state of "mamba" itself is protected.
        r.execute_command("KV.PREFIX.REGISTER", "mamba", 1, "fp32")
        assert r.execute_command("KV.PREFIX.LOOKUP", "mamba") == b"HIT"
        assert r.execute_command("SSM.PREFIX.FETCH", "mamba", 0) == blob(600_000, 1)
    finally:
        server.stop()
