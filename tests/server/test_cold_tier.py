"""--cold-tier: pion-server fronts sharing a real Redis Cluster (3 masters + 3 replicas) as cold tier.

One cluster per module (started in ~7 s); each test starts its own fronts and uses its own
namespaces. Skipped when redis-server / redis-cli are not installed (.ci/run installs them).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import redis

from support.procs import ServerProcess, free_port, start_server
from support.redis_cluster import RedisCluster, cluster_tools_missing, start_cluster
from support.workers import start_workers

KV_DIM = 192  # SmolLM2-135M: 3 KV heads x 64
LAYERS = 4
TOKENS = 48

pytestmark = pytest.mark.skipif(cluster_tools_missing() is not None, reason=str(cluster_tools_missing()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    c = start_cluster(tmp_path_factory.mktemp("redis-cluster"), masters=3, replicas=1)
    try:
        yield c
    finally:
        c.stop()


def start_fronts(base: Path, cluster: RedisCluster, n: int = 2) -> list[ServerProcess]:
    return [start_server(base / f"front-{i}", "--cold-tier", cluster.url) for i in range(n)]


@pytest.fixture(scope="module")
def shared_fronts(tmp_path_factory: pytest.TempPathFactory, cluster: RedisCluster) -> Iterator[list[ServerProcess]]:
    started = start_fronts(tmp_path_factory.mktemp("fronts"), cluster)
    try:
        yield started
    finally:
        for s in started:
            s.stop()


@pytest.fixture
def fronts(shared_fronts: list[ServerProcess]) -> list[ServerProcess]:
    """Fronts A and B on the cluster, counters zeroed (tests use distinct namespaces)."""
    for front in shared_fronts:
        assert front.client().execute_command("PION.STATS", "RESET") == b"OK"
    return shared_fronts


@pytest.fixture
def own_fronts(tmp_path: Path, cluster: RedisCluster) -> Iterator[list[ServerProcess]]:
    """Fronts for a test that kills one."""
    started = start_fronts(tmp_path, cluster)
    try:
        yield started
    finally:
        for s in started:
            s.stop()


def rows(seed: int, n: int = TOKENS) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, KV_DIM)).astype(np.float16)


def store_prefix(conn: redis.Redis, ns: str, fmt: str = "fp16", seed: int = 0,
                 layers: int = LAYERS) -> dict[tuple[str, int], np.ndarray]:
    """Register ``ns`` with LAYERS and store every layer of both sides; returns what was sent."""
    assert conn.execute_command("KV.PREFIX.REGISTER", ns, KV_DIM, fmt, "LAYERS", layers) == b"OK"
    sent = {}
    for side in ("pk", "pv"):
        for layer in range(layers):
            block = rows(seed * 1000 + layer * 2 + (side == "pv"))
            n = conn.execute_command("V.STOREBATCH", f"{ns}_{side}", layer, 0, block.tobytes(), "DTYPE", "f16")
            assert n == TOKENS
            sent[(side, layer)] = block
    return sent


def fetch(conn: redis.Redis, ns: str, side: str, layer: int, dtype: str = "f16") -> bytes:
    return bytes(conn.execute_command("V.FETCH", f"{ns}_{side}", layer, "RANGE", 0, TOKENS, "DTYPE", dtype))


def stats(conn: redis.Redis) -> dict[str, object]:
    flat = conn.execute_command("PION.STATS")
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def test_a_prefix_stored_through_front_a_is_restored_bit_exact_through_front_b(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    sent = store_prefix(a, "fp16-shared")
    assert b.execute_command("KV.PREFIX.LOOKUP", "fp16-shared") == b"HIT"
    for (side, layer), block in sent.items():
        assert fetch(b, "fp16-shared", side, layer) == block.tobytes()
    got = stats(b)
    assert (got["coldtier_hits"], got["coldtier_promotions"]) == (1, 1)
    assert got["coldtier_bytes_read"] == 2 * LAYERS * TOKENS * KV_DIM * 2
    assert got["kvprefix_hits"] == 1 and got["kvprefix_tokens_served"] == TOKENS
    assert stats(a)["coldtier_bytes_written"] == 2 * LAYERS * TOKENS * KV_DIM * 2


def test_an_int8_prefix_travels_encoded_and_decodes_within_the_int8_bound(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    sent = store_prefix(a, "int8-shared", fmt="int8", seed=1)
    assert b.execute_command("KV.PREFIX.LOOKUP", "int8-shared") == b"HIT"
    for (side, layer), block in sent.items():
        assert fetch(b, "int8-shared", side, layer, "raw") == fetch(a, "int8-shared", side, layer, "raw")
        restored = np.frombuffer(fetch(b, "int8-shared", side, layer, "f32"), dtype=np.float32).reshape(-1, KV_DIM)
        x = block.astype(np.float32)
        bound = np.abs(x).max(axis=1, keepdims=True) / 127 * (0.5 + 1e-2)  # scale/2 + fp16 rounding of the scale
        assert bool(np.all(np.abs(restored - x) <= bound)) is True
    # the cold tier holds the int8 rows (D + 2 bytes each), not floats
    assert stats(b)["coldtier_bytes_read"] == 2 * LAYERS * TOKENS * (KV_DIM + 2)


def promote_hearing(cluster: RedisCluster, ns: str, announced: str | None | bool) -> tuple[bool, int]:
    """Promote ``ns`` into a fresh in-process front (real ColdTier, real V-store) while an
    invalidation announcing ``announced`` arrives mid-read (True: the generation the cluster
    holds, as when the writing front's own announcement is delivered late). Returns (promoted,
    rows now warm)."""
    from pion.server.coldtier.bridge import ColdBridge
    from pion.server.coldtier.tier import ColdTier
    from pion.server.coldtier.url import parse_cold_tier_url
    from pion.server.store.vstore import VStore

    async def run() -> tuple[bool, int]:
        tier = ColdTier(parse_cold_tier_url("--cold-tier", cluster.url), "through")
        bridge = ColdBridge(tier, VStore())
        try:
            index = await tier.read_index(ns)
            assert index is not None and index.gen is not None
            gen = index.gen if announced is True else announced
            promotion = asyncio.get_running_loop().create_task(bridge.promote(ns))
            await asyncio.sleep(0)  # the promotion is now waiting on its index read
            bridge.invalidate("another-front", gen, ns)
            promoted = await promotion
            session = bridge.vstore.get(f"{ns}_pk")
            return promoted, 0 if session is None else session.rows_in(0)
        finally:
            tier.close()

    return asyncio.run(run())


def test_a_late_announcement_of_the_registration_being_promoted_does_not_turn_it_into_a_miss(
        fronts: list[ServerProcess], cluster: RedisCluster) -> None:
    """CI caught this race: front A's pub/sub announcement of its own registration reached B
    during B's promotion of those very rows, and B answered MISS."""
    store_prefix(fronts[0].client(), "late-announcement", seed=3)
    assert promote_hearing(cluster, "late-announcement", True) == (True, TOKENS)


@pytest.mark.parametrize("announced", [None, "a-newer-generation"], ids=["drop", "re-registration"])
def test_a_drop_or_a_newer_registration_heard_mid_promotion_keeps_the_read_rows_out(
        fronts: list[ServerProcess], cluster: RedisCluster, announced: str | None) -> None:
    store_prefix(fronts[0].client(), f"superseded-{announced}", seed=4)
    assert promote_hearing(cluster, f"superseded-{announced}", announced) == (False, 0)


def test_front_b_still_serves_a_prefix_after_front_a_is_killed_9(own_fronts: list[ServerProcess]) -> None:
    a_proc, b_proc = own_fronts
    sent = store_prefix(a_proc.client(), "survives-a", seed=2)
    a_proc.kill9()
    b = b_proc.client()
    assert b.execute_command("KV.PREFIX.LOOKUP", "survives-a") == b"HIT"
    assert fetch(b, "survives-a", "pv", LAYERS - 1) == sent[("pv", LAYERS - 1)].tobytes()


def test_a_lookup_of_an_unknown_prefix_misses_on_both_tiers(fronts: list[ServerProcess]) -> None:
    b = fronts[1].client()
    assert b.execute_command("KV.PREFIX.LOOKUP", "never-stored") == b"MISS"
    got = stats(b)
    assert (got["coldtier_misses"], got["kvprefix_misses"], got["coldtier_hits"]) == (1, 1, 0)


def test_a_half_written_prefix_in_the_cold_tier_is_a_miss(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    a.execute_command("KV.PREFIX.REGISTER", "half", KV_DIM, "fp16", "LAYERS", 2)
    a.execute_command("V.STOREBATCH", "half_pk", 0, 0, rows(3).tobytes(), "DTYPE", "f16")
    assert b.execute_command("KV.PREFIX.LOOKUP", "half") == b"MISS"
    assert b.execute_command("V.LIST", "half*") == []  # nothing promoted


def test_blocks_and_membership_on_a_front_without_the_prefix_read_the_cold_index(
        fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    hashes = np.array([11, 22, 33], dtype="<u8").tobytes()
    a.execute_command("KV.PREFIX.REGISTER", "blocky", KV_DIM, "fp16", "BLOCKS", 16, 3, hashes)
    assert b.execute_command("KV.PREFIX.BLOCKS", "blocky") == a.execute_command("KV.PREFIX.BLOCKS", "blocky")
    probes = np.array([22, 44], dtype="<u8").tobytes()
    assert b.execute_command("KV.PREFIX.MEMBERSHIP", "blocky", 2, probes) == bytes([0b01])
    assert b.execute_command("KV.PREFIX.BLOCKS", "nothing-here") == b"UNKNOWN"
    assert b.execute_command("V.LIST", "blocky*") == []  # reading the index promoted nothing


def test_drop_removes_the_prefix_from_the_cold_tier_too(fronts: list[ServerProcess], cluster: RedisCluster) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "dropped", seed=4)
    assert a.execute_command("KV.PREFIX.DROP", "dropped", "other") == 1
    assert b.execute_command("KV.PREFIX.LOOKUP", "dropped") == b"MISS"
    node = cluster.master_of("pion:{dropped}:idx").client()
    assert node.exists("pion:{dropped}:idx", "pion:{dropped}:k:0", "pion:{dropped}:v:3") == 0


def test_drop_on_a_front_that_only_the_cold_tier_holds_it_for_counts_it(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "cold-only-drop", seed=5)
    assert b.execute_command("KV.PREFIX.DROP", "cold-only-drop") == 1
    assert b.execute_command("KV.PREFIX.DROP", "cold-only-drop") == 0


def test_eviction_on_a_demotes_and_a_later_lookup_promotes(tmp_path: Path, cluster: RedisCluster) -> None:
    one_prefix = 2 * LAYERS * TOKENS * KV_DIM * 2
    a_proc = start_server(tmp_path / "small", "--cold-tier", cluster.url, "--maxmemory", str(one_prefix + 4096))
    try:
        a = a_proc.client()
        first = store_prefix(a, "evicted-first", seed=6)
        store_prefix(a, "evicts-it", seed=7)
        got = stats(a)
        assert (got["coldtier_demotions"], got["coldtier_promotions"]) == (1, 0)
        info = a.execute_command("KV.PREFIX.INFO").decode()
        assert "registered_prefixes:1" in info
        assert a.execute_command("KV.PREFIX.LOOKUP", "evicted-first") == b"HIT"
        for (side, layer), block in first.items():
            assert fetch(a, "evicted-first", side, layer) == block.tobytes()
        got = stats(a)
        assert (got["coldtier_demotions"], got["coldtier_promotions"], got["coldtier_hits"]) == (2, 1, 1)
    finally:
        a_proc.stop()


def test_write_behind_reaches_the_cold_tier_shortly_after_the_reply(tmp_path: Path, cluster: RedisCluster) -> None:
    a_proc = start_server(tmp_path / "behind-a", "--cold-tier", cluster.url, "--cold-tier-mode", "behind")
    b_proc = start_server(tmp_path / "behind-b", "--cold-tier", cluster.url)
    try:
        sent = store_prefix(a_proc.client(), "behind", seed=8)
        b = b_proc.client()
        deadline = time.monotonic() + 10
        while b.execute_command("KV.PREFIX.LOOKUP", "behind") != b"HIT":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert fetch(b, "behind", "pk", 0) == sent[("pk", 0)].tobytes()
    finally:
        a_proc.stop()
        b_proc.stop()


def test_a_bad_lookup_is_refused_and_promotes_nothing(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "bad-lookup", seed=9)
    with pytest.raises(redis.ResponseError, match="syntax error"):
        b.execute_command("KV.PREFIX.LOOKUP", "bad-lookup", "NOPE", "1")
    assert b.execute_command("V.LIST", "bad-lookup*") == []
    assert stats(b)["coldtier_promotions"] == 0


def test_pion_stats_adds_the_eight_cold_tier_fields_after_the_sixteen(fronts: list[ServerProcess],
                                                                 pion_server: ServerProcess) -> None:
    names = list(stats(fronts[0].client()))
    assert names[16:] == ["coldtier_hits", "coldtier_misses", "coldtier_promotions", "coldtier_demotions",
                          "coldtier_bytes_read", "coldtier_bytes_written", "coldtier_errors",
                          "coldtier_invalidations"]
    assert len(stats(pion_server.client())) == 16


@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:7000", "must start with redis-cluster:// or redis://"),
    ("redis-cluster://127.0.0.1", "is not host:port"),
    ("redis-cluster://127.0.0.1:0", "is not a port number"),
    ("redis://a:1,b:2", "redis:// takes one host:port"),
    ("redis://127.0.0.1:7000/0", "no path, credentials or query"),
])
def test_a_bad_cold_tier_url_is_refused_at_start_up_with_exit_2(tmp_path: Path, url: str, message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pion.server", "--port", str(free_port()),
                           "--dir", str(tmp_path), "--cold-tier", url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr


def test_with_the_cold_tier_down_lookup_misses_and_the_warm_tier_keeps_serving(tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    front = start_server(tmp_path / "down", "--cold-tier", dead)
    try:
        conn = front.client()
        sent = store_prefix(conn, "warm-only", seed=10)
        assert conn.execute_command("KV.PREFIX.LOOKUP", "warm-only") == b"HIT"
        assert fetch(conn, "warm-only", "pk", 1) == sent[("pk", 1)].tobytes()
        assert conn.execute_command("KV.PREFIX.LOOKUP", "elsewhere") == b"MISS"
        got = stats(conn)
        assert got["coldtier_misses"] == 1 and int(got["coldtier_errors"]) >= 1  # type: ignore[call-overload]
        assert "cold tier redis://" in front.log() and "the warm tier keeps serving" in front.log()
    finally:
        front.stop()


def test_a_schema_prefix_with_mixed_formats_is_restored_with_its_formats(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    formats = ["fp16", "int8", "fp16", "fp8"]  # K layers 0-1, V layers 0-1
    assert a.execute_command("KV.PREFIX.REGISTER.SCHEMA", "schema", KV_DIM, 2, *formats) == b"OK"
    for side in ("pk", "pv"):
        for layer in range(2):
            a.execute_command("V.STOREBATCH", f"schema_{side}", layer, 0, rows(20 + layer).tobytes(), "DTYPE", "f16")
    assert b.execute_command("KV.PREFIX.LOOKUP", "schema") == b"HIT"
    assert b.execute_command("V.INFO", "schema_pv") == a.execute_command("V.INFO", "schema_pv")
    for side in ("pk", "pv"):
        for layer in range(2):
            assert fetch(b, "schema", side, layer, "raw") == fetch(a, "schema", side, layer, "raw")


def test_concurrent_lookups_of_a_cold_prefix_on_one_front_share_one_promotion(fronts: list[ServerProcess]) -> None:
    a, b = fronts
    store_prefix(a.client(), "herd", seed=12)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: b.client().execute_command("KV.PREFIX.LOOKUP", "herd"), range(8)))
    assert answers == [b"HIT"] * 8
    got = stats(b.client())
    assert (got["coldtier_promotions"], got["kvprefix_hits"]) == (1, 8)
    assert got["coldtier_bytes_read"] == 2 * LAYERS * TOKENS * KV_DIM * 2


def wait_invalidations(conn: redis.Redis, n: int) -> None:
    """Until the front has dropped n warm copies on hearing other fronts (pub/sub is asynchronous)."""
    deadline = time.monotonic() + 10
    while stats(conn)["coldtier_invalidations"] != n:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_drop_on_front_a_makes_front_b_drop_its_promoted_copy(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "inval-drop", seed=13)
    assert b.execute_command("KV.PREFIX.LOOKUP", "inval-drop") == b"HIT"
    assert a.execute_command("KV.PREFIX.DROP", "inval-drop") == 1
    wait_invalidations(b, 1)
    assert b.execute_command("V.LIST", "inval-drop*") == []
    assert b.execute_command("KV.PREFIX.LOOKUP", "inval-drop") == b"MISS"
    assert stats(a)["coldtier_invalidations"] == 0  # a front ignores its own announcements


def test_a_drop_on_front_b_drops_the_copy_front_a_registered_itself(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "inval-owner", seed=14)
    assert b.execute_command("KV.PREFIX.DROP", "inval-owner") == 1
    wait_invalidations(a, 1)
    assert a.execute_command("KV.PREFIX.LOOKUP", "inval-owner") == b"MISS"


def test_a_re_registration_after_a_drop_is_served_fresh_by_front_b(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "inval-again", seed=15)
    assert b.execute_command("KV.PREFIX.LOOKUP", "inval-again") == b"HIT"
    assert a.execute_command("KV.PREFIX.DROP", "inval-again") == 1
    fresh = store_prefix(a, "inval-again", seed=16)
    wait_invalidations(b, 1)
    assert b.execute_command("KV.PREFIX.LOOKUP", "inval-again") == b"HIT"
    for (side, layer), block in fresh.items():
        assert fetch(b, "inval-again", side, layer) == block.tobytes()
    assert stats(b)["coldtier_promotions"] == 2


def test_two_fronts_registering_the_same_prefix_at_once_both_keep_their_copies(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    for conn in (a, b):  # both missed and prefilled the same prompt: both register, then store
        assert conn.execute_command("KV.PREFIX.REGISTER", "inval-herd", KV_DIM, "fp16", "LAYERS", 1) == b"OK"
    block = rows(21)
    for conn in (a, b):
        for side in ("pk", "pv"):
            assert conn.execute_command("V.STOREBATCH", f"inval-herd_{side}", 0, 0, block.tobytes(), "DTYPE", "f16") == TOKENS
    time.sleep(0.2)  # let each hear the other's announcement
    for conn in (a, b):
        assert conn.execute_command("KV.PREFIX.LOOKUP", "inval-herd") == b"HIT"
        assert fetch(conn, "inval-herd", "pv", 0) == block.tobytes()
        assert stats(conn)["coldtier_invalidations"] == 0


def test_warm_hits_on_a_subscribed_front_do_not_read_the_cold_tier(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "inval-quiet", seed=17)
    assert b.execute_command("KV.PREFIX.LOOKUP", "inval-quiet") == b"HIT"
    before = stats(b)
    for _ in range(5):
        assert b.execute_command("KV.PREFIX.LOOKUP", "inval-quiet") == b"HIT"
    after = stats(b)
    assert (after["coldtier_hits"], after["coldtier_misses"], after["kvprefix_hits"]) == (
        before["coldtier_hits"], before["coldtier_misses"], int(before["kvprefix_hits"]) + 5)  # type: ignore[call-overload]


def test_a_front_that_was_down_during_a_drop_rechecks_its_copy_and_misses(
        tmp_path: Path, cluster: RedisCluster) -> None:
    a_proc = start_server(tmp_path / "a", "--cold-tier", cluster.url)
    b_proc = start_server(tmp_path / "b", "--cold-tier", cluster.url)
    try:
        store_prefix(a_proc.client(), "inval-away", seed=18)
        kept = store_prefix(a_proc.client(), "inval-kept", seed=19)
        for ns in ("inval-away", "inval-kept"):
            assert b_proc.client().execute_command("KV.PREFIX.LOOKUP", ns) == b"HIT"
        b_proc.stop()
        assert a_proc.client().execute_command("KV.PREFIX.DROP", "inval-away") == 1
        b_proc = start_server(tmp_path / "b", "--cold-tier", cluster.url, port=b_proc.port)
        b = b_proc.client()
        assert b.execute_command("V.LIST", "inval-*") == [b"inval-away_pk", b"inval-away_pv",
                                                          b"inval-kept_pk", b"inval-kept_pv"]  # from its WAL
        assert b.execute_command("KV.PREFIX.LOOKUP", "inval-away") == b"MISS"  # re-checked: gone
        assert b.execute_command("KV.PREFIX.LOOKUP", "inval-kept") == b"HIT"  # re-checked: current
        assert fetch(b, "inval-kept", "pk", 1) == kept[("pk", 1)].tobytes()
        got = stats(b)
        assert (got["coldtier_invalidations"], got["coldtier_promotions"]) == (1, 0)
        assert b.execute_command("V.LIST", "inval-*") == [b"inval-kept_pk", b"inval-kept_pv"]
    finally:
        a_proc.stop()
        b_proc.stop()


def test_under_w_2_one_worker_promotes_and_the_other_answers_from_the_directory(
        tmp_path: Path, cluster: RedisCluster) -> None:
    a_proc = start_server(tmp_path / "single", "--cold-tier", cluster.url)
    group = start_workers(tmp_path / "w2", 2, "--cold-tier", cluster.url)
    try:
        a = a_proc.client()
        sent = store_prefix(a, "workers-shared", seed=20)
        w0, w1 = group.worker(0), group.worker(1)
        assert w0.execute_command("KV.PREFIX.LOOKUP", "workers-shared") == b"HIT"  # promoted into worker 0
        assert w1.execute_command("KV.PREFIX.LOOKUP", "workers-shared") == b"HIT"  # its directory entry
        with pytest.raises(redis.ResponseError,
                           match=f"^V.FETCH session lives on worker 0 127.0.0.1:{group.ports[0]}$"):
            fetch(w1, "workers-shared", "pk", 1)
        assert fetch(w0, "workers-shared", "pk", 1) == sent[("pk", 1)].tobytes()
        assert (stats(w0)["coldtier_promotions"], stats(w1)["coldtier_promotions"]) == (1, 0)
        assert w1.execute_command("KV.PREFIX.DROP", "workers-shared") == 1  # run by its owner, worker 0
        assert w0.execute_command("V.LIST", "workers-shared*") == []
        wait_invalidations(a, 1)  # the single front heard worker 0's announcement
        assert a.execute_command("KV.PREFIX.LOOKUP", "workers-shared") == b"MISS"
    finally:
        group.server.stop()
        a_proc.stop()


def test_a_layer_appended_in_chunks_sends_each_row_once_to_the_cold_tier(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    assert a.execute_command("KV.PREFIX.REGISTER", "chunked", KV_DIM, "fp16", "LAYERS", 1) == b"OK"
    full = {side: rows(30 + (side == "pv")) for side in ("pk", "pv")}
    for start in range(0, TOKENS, 12):  # four appends of 12 rows per side
        for side, block in full.items():
            chunk = block[start:start + 12].tobytes()
            assert a.execute_command("V.STOREBATCH", f"chunked_{side}", 0, start, chunk, "DTYPE", "f16") == start + 12
    assert stats(a)["coldtier_bytes_written"] == 2 * TOKENS * KV_DIM * 2  # not 12+24+36+48 rows a side
    assert b.execute_command("KV.PREFIX.LOOKUP", "chunked") == b"HIT"
    for side, block in full.items():
        assert fetch(b, "chunked", side, 0) == block.tobytes()


def test_a_chunk_after_a_gap_in_the_cold_tier_rewrites_the_whole_layer(
        fronts: list[ServerProcess], cluster: RedisCluster) -> None:
    a, b = (s.client() for s in fronts)
    assert a.execute_command("KV.PREFIX.REGISTER", "gapped", KV_DIM, "fp16", "LAYERS", 1) == b"OK"
    full = {side: rows(40 + (side == "pv")) for side in ("pk", "pv")}
    for side, block in full.items():
        a.execute_command("V.STOREBATCH", f"gapped_{side}", 0, 0, block[:24].tobytes(), "DTYPE", "f16")
    # as if the cluster's maxmemory policy evicted the K rows: the next append must not leave a gap
    assert cluster.master_of("pion:{gapped}:idx").client().delete("pion:{gapped}:k:0") == 1
    for side, block in full.items():
        a.execute_command("V.STOREBATCH", f"gapped_{side}", 0, 24, block[24:].tobytes(), "DTYPE", "f16")
    row = KV_DIM * 2
    # K: 24 rows, then the whole 48 (the refused append sent nothing); V: 24 + 24
    assert stats(a)["coldtier_bytes_written"] == (24 + 48 + 24 + 24) * row
    assert b.execute_command("KV.PREFIX.LOOKUP", "gapped") == b"HIT"
    for side, block in full.items():
        assert fetch(b, "gapped", side, 0) == block.tobytes()


def test_after_a_master_is_killed_and_its_replica_takes_over_the_prefix_is_still_served(
        fronts: list[ServerProcess], cluster: RedisCluster) -> None:
    """Runs last in this module: it leaves the cluster with one master replaced."""
    a, b = (s.client() for s in fronts)
    sent = store_prefix(a, "failover", seed=11)
    master = cluster.master_of("pion:{failover}:idx")
    # the write was acknowledged by the master; let the replica catch up before killing it
    master.client().execute_command("WAIT", 1, 2000)
    master.kill9()
    time.sleep(1)
    cluster.wait_ok()
    deadline = time.monotonic() + 20
    while b.execute_command("KV.PREFIX.LOOKUP", "failover") != b"HIT":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    for (side, layer), block in sent.items():
        assert fetch(b, "failover", side, layer) == block.tobytes()
