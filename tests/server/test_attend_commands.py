"""ATTEND.PREFIX.* and KV.PREFIX.WARM through a real pion-server with redis-py: every query form
against an fp64 reference, the cold tier, restart then WARM, the memory budget, and bad input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from pion.client.stage2.wire import is_coldmiss
from support.attention_ref import causal_allowed, close_to_reference, reference
from support.procs import ServerProcess, start_server
from support.replies import err

D = 16


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed * 7919 + sum(shape)).standard_normal(shape).astype("<f4")


def f32(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


def u32(values: list[int]) -> bytes:
    return np.asarray(values, dtype="<u4").tobytes()


def info(r: redis.Redis) -> dict[str, int]:
    text = r.execute_command("KV.PREFIX.INFO").decode()
    return {k: int(v) for k, v in (line.split(":") for line in text.split("\r\n") if line)}


@pytest.fixture(scope="module")
def r(shared_pion_server: ServerProcess) -> Iterator[redis.Redis]:
    with shared_pion_server.client() as client:
        yield client


def store(r: redis.Redis, sid: str, k: np.ndarray, v: np.ndarray, layer: int = 0) -> None:
    h, n, d = k.shape
    assert r.execute_command("ATTEND.PREFIX.STORE", sid, layer, h, n, d, k.tobytes(), v.tobytes()) == b"OK"


def check(got: np.ndarray, want: np.ndarray) -> None:
    ok, cos, err_abs = close_to_reference(got, want)
    assert (ok, cos >= 0.99999, err_abs <= 1e-5) == (True, True, True)


def test_lookup_answers_hit_for_a_stored_layer_and_miss_otherwise(r: redis.Redis) -> None:
    store(r, "lk", rand(2, 8, D), rand(2, 8, D, seed=1))
    assert [r.execute_command("ATTEND.PREFIX.LOOKUP", "lk", layer) for layer in (0, 1)] == [b"HIT", b"MISS"]


@pytest.mark.parametrize("h_q,m", [(4, 1), (4, 7), (2, 3)])
def test_query_matches_fp64_and_adds_the_lse_trailer_only_for_several_rows(r: redis.Redis, h_q: int,
                                                                           m: int) -> None:
    k, v, q = rand(2, 300, D), rand(2, 300, D, seed=1), rand(h_q, m, D, seed=2)
    store(r, "q1", k, v)
    reply = r.execute_command("ATTEND.PREFIX.QUERY", "q1", 0, h_q, D, 0, q.tobytes())
    want_out, want_lse = reference(q, k, v)
    n_out = h_q * m * D
    assert len(reply) == 4 * (n_out + (h_q * m if m > 1 else 0))
    check(f32(reply)[:n_out].reshape(h_q, m, D), want_out)
    if m > 1:
        assert float(np.abs(f32(reply)[n_out:].reshape(h_q, m) - want_lse).max()) < 1e-5


def test_query_with_fa_window_attends_the_last_w_positions(r: redis.Redis) -> None:
    k, v, q = rand(2, 100, D), rand(2, 100, D, seed=1), rand(2, 3, D, seed=2)
    store(r, "qw", k, v)
    reply = r.execute_command("ATTEND.PREFIX.QUERY", "qw", 0, 2, D, 0, q.tobytes(), 25)
    check(f32(reply)[:2 * 3 * D].reshape(2, 3, D), reference(q, k[:, 75:], v[:, 75:])[0])


@pytest.mark.parametrize("m,s", [(1, 1), (1, 6), (5, 5), (3, 8)])
def test_query_fused_equals_one_dense_causal_attention_over_prefix_and_suffix(r: redis.Redis, m: int,
                                                                              s: int) -> None:
    p = 120
    k, v = rand(2, p, D), rand(2, p, D, seed=1)
    q, ks, vs = rand(4, m, D, seed=2), rand(2, s, D, seed=3), rand(2, s, D, seed=4)
    store(r, "qf", k, v)
    reply = r.execute_command("ATTEND.PREFIX.QUERY_FUSED", "qf", 0, 4, D, s, 2, q.tobytes(), ks.tobytes(),
                              vs.tobytes(), u32([0, 0, 1, 1]))
    want, _ = reference(q, np.concatenate([k, ks], 1), np.concatenate([v, vs], 1), causal_allowed(m, p, s))
    assert len(reply) == 4 * 4 * m * D
    check(f32(reply).reshape(4, m, D), want)


def test_query_fused_with_a_permuted_head_map_and_fa_window(r: redis.Redis) -> None:
    p, m, s, window = 64, 2, 4, 10
    k, v = rand(2, p, D), rand(2, p, D, seed=1)
    q, ks, vs = rand(4, m, D, seed=2), rand(2, s, D, seed=3), rand(2, s, D, seed=4)
    store(r, "qh", k, v)
    head_map = [1, 0, 1, 0]
    reply = r.execute_command("ATTEND.PREFIX.QUERY_FUSED", "qh", 0, 4, D, s, 2, q.tobytes(), ks.tobytes(),
                              vs.tobytes(), u32(head_map), window)
    want, _ = reference(q, np.concatenate([k, ks], 1), np.concatenate([v, vs], 1),
                        causal_allowed(m, p, s, window), head_map)
    check(f32(reply).reshape(4, m, D), want)


def test_query_sparse_attends_the_given_indices_per_head(r: redis.Redis) -> None:
    k, v, q = rand(2, 50, D), rand(2, 50, D, seed=1), rand(2, 1, D, seed=2)
    store(r, "qs", k, v)
    reply = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE", "qs", 0, 2, D, 3, q.tobytes(),
                              u32([4, 8, 49, 0, 1, 0]), u32([3, 2]))
    allowed = np.zeros((2, 1, 50), dtype=bool)
    allowed[0, 0, [4, 8, 49]] = True
    allowed[1, 0, [0, 1]] = True
    check(f32(reply).reshape(2, 1, D), reference(q, k, v, allowed)[0])


@pytest.mark.parametrize("m", [1, 4])
def test_query_sparse_auto_with_every_block_selected_equals_dense(r: redis.Redis, m: int) -> None:
    k, v, q = rand(2, 200, D), rand(2, 200, D, seed=1), rand(4, m, D, seed=2)
    store(r, "qa", k, v)
    reply = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO", "qa", 0, 4, D, 16, 13, 2, q.tobytes(), b"")
    want_out, want_lse = reference(q, k, v)
    check(f32(reply)[:4 * m * D].reshape(4, m, D), want_out)
    if m > 1:
        assert float(np.abs(f32(reply)[4 * m * D:].reshape(4, m) - want_lse).max()) < 1e-5


def test_query_sparse_auto_fused_with_every_block_equals_dense_over_prefix_and_suffix(r: redis.Redis) -> None:
    p, m, s = 96, 3, 5
    k, v = rand(2, p, D), rand(2, p, D, seed=1)
    q, ks, vs = rand(4, m, D, seed=2), rand(2, s, D, seed=3), rand(2, s, D, seed=4)
    store(r, "qaf", k, v)
    reply = r.execute_command("ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED", "qaf", 0, 4, D, 32, 3, 2, s, q.tobytes(),
                              ks.tobytes(), vs.tobytes(), b"")
    want, _ = reference(q, np.concatenate([k, ks], 1), np.concatenate([v, vs], 1), causal_allowed(m, p, s))
    check(f32(reply).reshape(4, m, D), want)


def test_store_accepts_f16_blobs(r: redis.Redis) -> None:
    k, v, q = rand(1, 10, D).astype("<f2"), rand(1, 10, D, seed=1).astype("<f2"), rand(1, 1, D, seed=2)
    assert r.execute_command("ATTEND.PREFIX.STORE", "h16", 0, 1, 10, D, k.tobytes(), v.tobytes(),
                             "DTYPE", "f16") == b"OK"
    reply = r.execute_command("ATTEND.PREFIX.QUERY", "h16", 0, 1, D, 0, q.tobytes())
    check(f32(reply).reshape(1, 1, D), reference(q, k.astype("<f4"), v.astype("<f4"))[0])


BAD_QUERIES = [
    (("ATTEND.PREFIX.QUERY", "bad", 0, 2, D, 0, b"\x00" * 12), "not a whole number"),
    (("ATTEND.PREFIX.QUERY", "bad", 0, 2, 8, 0, bytes(2 * 8 * 4)), "does not match the stored layer's head_dim"),
    (("ATTEND.PREFIX.QUERY", "bad", 0, 3, D, 0, bytes(3 * D * 4)), "not a multiple of the stored layer's"),
    (("ATTEND.PREFIX.QUERY", "bad", 0, 2, D, 0, np.full(2 * D, np.nan, "<f4").tobytes()), "NaN or Inf"),
    (("ATTEND.PREFIX.QUERY", "bad", 0, 2, D, 0, bytes(2 * D * 4), 0), "fa_window must be"),
    (("ATTEND.PREFIX.QUERY", "bad", 0, 2, D, 0, bytes(2 * D * 4), 5, 6), "too many arguments"),
    (("ATTEND.PREFIX.QUERY", "nosuch", 0, 2, D, 0, bytes(2 * D * 4)), "not found"),
    (("ATTEND.PREFIX.QUERY", "bad", 0, 4096, 4096, 0, b"\x00" * 64), "not a whole number"),
    (("ATTEND.PREFIX.QUERY_FUSED", "bad", 0, 2, D, 1, 2, bytes(2 * D * 4), bytes(2 * D * 4), bytes(2 * D * 4),
      u32([0, 2])), "head_map entry 2 is out of range"),
    (("ATTEND.PREFIX.QUERY_FUSED", "bad", 0, 2, D, 1, 1, bytes(2 * D * 4), bytes(D * 4), bytes(D * 4), b""),
     "H_kv 1 does not match"),
    (("ATTEND.PREFIX.QUERY_FUSED", "bad", 0, 2, D, 1, 2, bytes(2 * 3 * D * 4), bytes(2 * D * 4),
      bytes(2 * D * 4), b""), "M must be <= S_suf"),
    (("ATTEND.PREFIX.QUERY_FUSED", "bad", 0, 2, D, 2, 2, bytes(2 * D * 4), bytes(2 * D * 4), bytes(2 * D * 4),
      b""), "K_suf is"),
    (("ATTEND.PREFIX.QUERY_SPARSE", "bad", 0, 2, D, 2, bytes(2 * D * 4), u32([0, 1, 2, 9]), u32([2, 2])),
     "out of range"),
    (("ATTEND.PREFIX.QUERY_SPARSE", "bad", 0, 2, D, 2, bytes(2 * D * 4), u32([0, 1, 2, 3]), u32([0, 2])),
     "counts must each be"),
    (("ATTEND.PREFIX.QUERY_SPARSE_AUTO", "bad", 0, 2, D, 0, 1, 2, bytes(2 * D * 4), b""), "B must be"),
    (("ATTEND.PREFIX.STORE", "bad2", 0, 2, 4, D, bytes(10), bytes(2 * 4 * D * 4)), "K_blob is 10 bytes"),
    (("ATTEND.PREFIX.STORE", "bad2", 0, 1, 1, 2, np.array([1, np.inf], "<f4").tobytes(), bytes(8)),
     "NaN or Inf"),
    (("ATTEND.PREFIX.STORE", "bad2", 0, 1, 0, 2, b"", b""), "N must be"),
    (("ATTEND.PREFIX.STORE", "bad2", 0, 1, 1, 2, bytes(8), bytes(8), "DTYPE", "bf16"), "unknown DTYPE"),
    (("ATTEND.PREFIX.LOOKUP", "bad", -1), "layer must be"),
    (("KV.PREFIX.WARM", "no-such-ns", 2, D), "not found in the V-store"),
]


@pytest.mark.parametrize("command,message", BAD_QUERIES, ids=[f"{c[0]}-{i}" for i, (c, _) in enumerate(BAD_QUERIES)])
def test_bad_input_is_refused_with_what_is_wrong_and_changes_nothing(r: redis.Redis, command: tuple[object, ...],
                                                                     message: str) -> None:
    k, v = rand(2, 6, D), rand(2, 6, D, seed=1)
    store(r, "bad", k, v)
    before = info(r)
    assert message in err(r, *command)
    assert info(r) == before
    assert r.execute_command("ATTEND.PREFIX.LOOKUP", "bad2", 0) == b"MISS"
    q = rand(2, 1, D, seed=5)
    check(f32(r.execute_command("ATTEND.PREFIX.QUERY", "bad", 0, 2, D, 0, q.tobytes())).reshape(2, 1, D),
          reference(q, k, v)[0])


def register_prefix(r: redis.Redis, ns: str, k: np.ndarray, v: np.ndarray, fmt: str = "fp32") -> None:
    """Store ``[H, N, D]`` K/V in the V-store as ``<ns>_pk``/``<ns>_pv`` rows ``[N, H*D]``, one layer."""
    h, n, d = k.shape
    assert r.execute_command("KV.PREFIX.REGISTER", ns, h * d, fmt, "LAYERS", 1) == b"OK"
    for side, x in (("_pk", k), ("_pv", v)):
        rows = np.ascontiguousarray(x.transpose(1, 0, 2).reshape(n, h * d))
        assert r.execute_command("V.STOREBATCH", ns + side, 0, 0, rows.tobytes(), "DTYPE", "f32") == n


@pytest.mark.slow  # a long workload: make test runs it, make test-fast skips it
def test_the_257th_session_demotes_the_first_which_answers_coldmiss_until_warmed(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        with server.client() as r:
            k, v, q = rand(1, 8, 4), rand(1, 8, 4, seed=1), rand(1, 1, 4, seed=2)
            register_prefix(r, "cold0", k, v)
            store(r, "cold0", k, v)
            for i in range(1, 257):
                store(r, f"cold{i}", k, v)
            assert r.execute_command("ATTEND.PREFIX.LOOKUP", "cold0", 0) == b"COLD"
            fields = info(r)
            assert [fields[f] for f in ("sdpa_warm", "sdpa_cold", "sdpa_demotions", "sdpa_rehydrates")] == [
                256, 1, 1, 0]
            assert err(r, "ATTEND.PREFIX.QUERY", "cold0", 0, 1, 4, 0, q.tobytes()) == "COLDMISS cold0 0"
            pipe = r.pipeline(transaction=False)  # pion-llm --stage2 queries segments in a pipeline
            pipe.execute_command("PING")  # (querying another slot would change the LRU order)
            pipe.execute_command("ATTEND.PREFIX.QUERY", "cold0", 0, 1, 4, 0, q.tobytes())
            with pytest.raises(redis.ResponseError) as wrapped:
                pipe.execute()
            assert str(wrapped.value).startswith("Command # 2")
            assert is_coldmiss(wrapped.value) is True
            assert r.execute_command("KV.PREFIX.WARM", "cold0", 1, 4) == b"1"
            reply = r.execute_command("ATTEND.PREFIX.QUERY", "cold0", 0, 1, 4, 0, q.tobytes())
            check(f32(reply).reshape(1, 1, 4), reference(q, k, v)[0])
            fields = info(r)
            assert [fields[f] for f in ("sdpa_warm", "sdpa_cold", "sdpa_demotions", "sdpa_rehydrates")] == [
                256, 1, 2, 1]
            assert r.execute_command("ATTEND.PREFIX.LOOKUP", "cold1", 0) == b"COLD"
    finally:
        server.stop()


@pytest.mark.slow  # a long workload: make test runs it, make test-fast skips it
def test_after_a_restart_attend_state_is_gone_and_warm_rebuilds_it_from_the_v_store(tmp_path: Path) -> None:
    k, v, q = rand(2, 40, D), rand(2, 40, D, seed=1), rand(4, 3, D, seed=2)
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        with server.client() as r:
            register_prefix(r, "rs", k, v, fmt="fp16")
            store(r, "rs_attn", k, v)
    finally:
        server.stop()
    server = start_server(tmp_path / "data", port=server.port)
    try:
        with server.client() as r:
            assert r.execute_command("ATTEND.PREFIX.LOOKUP", "rs_attn", 0) == b"MISS"
            assert r.execute_command("KV.PREFIX.WARM", "rs", 2, D, "rs_attn") == b"1"
            assert r.execute_command("KV.PREFIX.WARM", "rs", 4, 4) == b"0 skipped_dim=1"
            reply = r.execute_command("ATTEND.PREFIX.QUERY", "rs_attn", 0, 4, D, 0, q.tobytes())
            k16, v16 = k.astype("<f2").astype("<f4"), v.astype("<f2").astype("<f4")
            check(f32(reply)[:4 * 3 * D].reshape(4, 3, D), reference(q, k16, v16)[0])
    finally:
        server.stop()


def test_warm_slots_count_against_maxmemory(tmp_path: Path) -> None:
    slot_bytes = 2 * 1 * 256 * D * 4
    server = start_server(tmp_path / "data", "--maxmemory", str(3 * slot_bytes + slot_bytes // 2))
    try:
        with server.client() as r:
            k = rand(1, 256, D)
            for i in range(4):
                store(r, f"mm{i}", k, k)
            states = [r.execute_command("ATTEND.PREFIX.LOOKUP", f"mm{i}", 0) for i in range(4)]
            assert states == [b"COLD", b"HIT", b"HIT", b"HIT"]
            big = rand(1, 2048, D)
            assert "maxmemory" in err(r, "ATTEND.PREFIX.STORE", "mmbig", 0, 1, 2048, D, big.tobytes(),
                                      big.tobytes())
            assert r.execute_command("ATTEND.PREFIX.LOOKUP", "mm3", 0) == b"HIT"
            assert r.info("memory")["attend_bytes"] == 3 * slot_bytes
    finally:
        server.stop()


def test_warm_that_cannot_fit_maxmemory_is_refused_before_any_layer_changes(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--maxmemory", str(200_000))
    try:
        with server.client() as r:
            k = rand(2, 300, D)
            assert r.execute_command("KV.PREFIX.REGISTER", "wbig", 2 * D, "fp16", "LAYERS", 2) == b"OK"
            rows = np.ascontiguousarray(k.transpose(1, 0, 2).reshape(300, 2 * D))
            for side in ("_pk", "_pv"):
                for layer in (0, 1):
                    r.execute_command("V.STOREBATCH", "wbig" + side, layer, 0, rows.tobytes(), "DTYPE", "f32")
            assert "maxmemory" in err(r, "KV.PREFIX.WARM", "wbig", 2, D)
            assert [r.execute_command("ATTEND.PREFIX.LOOKUP", "wbig", layer) for layer in (0, 1)] == [b"MISS", b"MISS"]
            assert info(r)["sdpa_warm"] == 0
    finally:
        server.stop()


def _maps_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_torch_is_loaded_only_by_the_first_attend_command(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        with server.client() as r:
            r.execute_command("KV.PREFIX.INFO")
            assert _maps_torch(server.proc.pid) is False
            assert r.execute_command("ATTEND.PREFIX.LOOKUP", "x", 0) == b"MISS"
            assert _maps_torch(server.proc.pid) is True
    finally:
        server.stop()
