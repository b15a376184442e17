"""The Stage-2 side (ATTEND.PREFIX.*, KV.PREFIX.WARM) on pion-server fronts sharing a cold tier.

A prefix stored through front A (V-store rows only, as PionPromptCache's stage-1 store does) is
held on front B by nobody but the cluster: B answers ``+COLD`` / ``-COLDMISS``, KV.PREFIX.WARM on B
promotes it and rebuilds the slots, and B's attention then equals A's bit for bit. A 3-master
cluster (no replicas: failover is test_cold_tier.py's) started once for the module, ~5 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from pion.client.stage2.binary_client import BinaryLaneClient, BinaryLaneError
from pion.client.stage2.wire import ColdMissError
from pion.common.binary_frames import CMD_ATTEND_PREFIX_LOOKUP, CMD_ATTEND_PREFIX_QUERY, CMD_KV_PREFIX_WARM
from support.procs import ServerProcess, free_port, start_server
from support.redis_cluster import RedisCluster, cluster_tools_missing, start_cluster

H, D = 3, 64  # SmolLM2-135M's KV heads and head_dim: kv_dim 192
LAYERS = 2
TOKENS = 24

pytestmark = pytest.mark.skipif(cluster_tools_missing() is not None, reason=str(cluster_tools_missing()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    c = start_cluster(tmp_path_factory.mktemp("redis-cluster"), masters=3, replicas=0)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def fronts(tmp_path_factory: pytest.TempPathFactory, cluster: RedisCluster) -> Iterator[list[ServerProcess]]:
    base = tmp_path_factory.mktemp("fronts")
    started = [start_server(base / f"front-{i}", "--cold-tier", cluster.url, "--binary-port", str(free_port()))
               for i in range(2)]
    try:
        yield started
    finally:
        for s in started:
            s.stop()


def store_prefix(conn: redis.Redis, ns: str, seed: int) -> None:
    """Stage 1's store: REGISTER with LAYERS, then both sides of every layer (fp16 rows)."""
    assert conn.execute_command("KV.PREFIX.REGISTER", ns, H * D, "fp16", "LAYERS", LAYERS) == b"OK"
    rng = np.random.default_rng(seed)
    for side in ("pk", "pv"):
        for layer in range(LAYERS):
            rows = rng.standard_normal((TOKENS, H * D)).astype(np.float16)
            assert conn.execute_command("V.STOREBATCH", f"{ns}_{side}", layer, 0, rows.tobytes(), "DTYPE", "f16") == TOKENS


def query(conn: redis.Redis, sid: str, layer: int) -> bytes:
    q = np.random.default_rng(99).standard_normal((H, 1, D)).astype("<f4")
    return bytes(conn.execute_command("ATTEND.PREFIX.QUERY", sid, layer, H, D, 0, q.tobytes()))


def stats(conn: redis.Redis) -> dict[str, object]:
    flat = conn.execute_command("PION.STATS")
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def binary(front: ServerProcess) -> BinaryLaneClient:
    port = int(front.extra_args[front.extra_args.index("--binary-port") + 1])
    return BinaryLaneClient("127.0.0.1", port)


def test_attend_lookup_on_a_front_holding_the_prefix_only_in_the_cold_tier_answers_cold(
        fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "s2-cold", seed=1)
    assert [b.execute_command("ATTEND.PREFIX.LOOKUP", "s2-cold_attn", layer) for layer in range(LAYERS)] == [
        b"COLD", b"COLD"]
    assert b.execute_command("ATTEND.PREFIX.LOOKUP", "s2-cold", 0) == b"COLD"  # WARM's default sid
    assert b.execute_command("ATTEND.PREFIX.LOOKUP", "s2-cold_attn", LAYERS) == b"MISS"  # no such layer
    assert b.execute_command("ATTEND.PREFIX.LOOKUP", "s2-nowhere_attn", 0) == b"MISS"
    assert b.execute_command("V.LIST", "s2-cold*") == []  # a LOOKUP reads the index, promotes nothing


def test_kv_prefix_warm_on_front_b_promotes_and_its_attention_equals_front_a(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "s2-warm", seed=2)
    assert a.execute_command("KV.PREFIX.WARM", "s2-warm", H, D, "s2-warm_attn") == str(LAYERS).encode()
    assert b.execute_command("KV.PREFIX.WARM", "s2-warm", H, D, "s2-warm_attn") == str(LAYERS).encode()
    assert stats(b)["coldtier_promotions"] == 1
    assert b.execute_command("ATTEND.PREFIX.LOOKUP", "s2-warm_attn", 1) == b"HIT"
    for layer in range(LAYERS):
        assert query(b, "s2-warm_attn", layer) == query(a, "s2-warm_attn", layer)


def test_a_query_on_front_b_answers_coldmiss_then_warm_and_retry_serves_it(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "s2-retry", seed=3)
    assert b.execute_command("KV.PREFIX.LOOKUP", "s2-retry") == b"HIT"  # promoted: V-store rows, no slots
    with pytest.raises(redis.ResponseError, match="^COLDMISS s2-retry_attn 1$"):
        query(b, "s2-retry_attn", 1)
    lane = binary(fronts[1])
    try:
        with pytest.raises(ColdMissError, match="COLDMISS s2-retry_attn 0"):  # the binary lane, the same
            lane.call(CMD_ATTEND_PREFIX_QUERY, [b"s2-retry_attn", b"0", b"3", b"64", b"0", bytes(H * D * 4)])
    finally:
        lane.close()
    assert b.execute_command("KV.PREFIX.WARM", "s2-retry", H, D, "s2-retry_attn") == str(LAYERS).encode()
    a.execute_command("KV.PREFIX.WARM", "s2-retry", H, D, "s2-retry_attn")
    assert query(b, "s2-retry_attn", 1) == query(a, "s2-retry_attn", 1)


def test_a_query_of_a_session_no_tier_holds_is_still_not_found(fronts: list[ServerProcess]) -> None:
    b = fronts[1].client()
    with pytest.raises(redis.ResponseError, match="^session 'no-such_attn' layer 0 not found"):
        query(b, "no-such_attn", 0)
    with pytest.raises(redis.ResponseError, match="^prefix 'no-such' not found in the V-store"):
        b.execute_command("KV.PREFIX.WARM", "no-such", H, D)
    with pytest.raises(redis.ResponseError, match="layer"):
        b.execute_command("ATTEND.PREFIX.LOOKUP", "no-such_attn", "x")


def test_the_binary_lane_answers_cold_from_the_v_store_and_warm_rebuilds_held_rows(
        fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "s2-binary", seed=4)
    lane = binary(fronts[1])
    try:
        # the binary lane is synchronous: it does not read the cluster, so a prefix only the
        # cold tier holds is a MISS there (RESP answers COLD, above) ...
        assert lane.call(CMD_ATTEND_PREFIX_LOOKUP, [b"s2-binary_attn", b"0"]) == b"MISS"
        with pytest.raises(BinaryLaneError, match="not found in the V-store"):
            lane.call(CMD_KV_PREFIX_WARM, [b"s2-binary", b"3", b"64", b"s2-binary_attn"])
        # ... and once the V-store holds it (a RESP LOOKUP promoted it), COLD, and WARM works
        assert b.execute_command("KV.PREFIX.LOOKUP", "s2-binary") == b"HIT"
        assert lane.call(CMD_ATTEND_PREFIX_LOOKUP, [b"s2-binary_attn", b"0"]) == b"COLD"
        assert lane.call(CMD_KV_PREFIX_WARM, [b"s2-binary", b"3", b"64", b"s2-binary_attn"]) == b"2"
        assert lane.call(CMD_ATTEND_PREFIX_LOOKUP, [b"s2-binary_attn", b"0"]) == b"HIT"
    finally:
        lane.close()


def test_a_drop_on_front_a_forgets_front_bs_attend_slots_of_that_prefix(fronts: list[ServerProcess]) -> None:
    a, b = (s.client() for s in fronts)
    store_prefix(a, "s2-dropped", seed=5)
    assert b.execute_command("KV.PREFIX.WARM", "s2-dropped", H, D, "s2-dropped_attn") == str(LAYERS).encode()
    assert a.execute_command("KV.PREFIX.DROP", "s2-dropped") == 1
    deadline = time.monotonic() + 10
    while stats(b)["coldtier_invalidations"] == 0:  # the announcement travels by pub/sub
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert b.execute_command("ATTEND.PREFIX.LOOKUP", "s2-dropped_attn", 0) == b"MISS"
    with pytest.raises(redis.ResponseError, match="^session 's2-dropped_attn' layer 0 not found"):
        query(b, "s2-dropped_attn", 0)
    assert b.execute_command("KV.PREFIX.LOOKUP", "s2-dropped") == b"MISS"


def test_a_restarted_front_answers_coldmiss_for_slots_its_v_store_can_rebuild(
        tmp_path: Path, cluster: RedisCluster) -> None:
    front = start_server(tmp_path / "restarts", "--cold-tier", cluster.url)
    try:
        conn = front.client()
        store_prefix(conn, "s2-restart", seed=6)
        assert conn.execute_command("KV.PREFIX.WARM", "s2-restart", H, D, "s2-restart_attn") == str(LAYERS).encode()
        front.stop()
        front = start_server(tmp_path / "restarts", "--cold-tier", cluster.url, port=front.port)
        conn = front.client()
        assert conn.execute_command("ATTEND.PREFIX.LOOKUP", "s2-restart_attn", 0) == b"COLD"
        with pytest.raises(redis.ResponseError, match="^COLDMISS s2-restart_attn 0$"):
            query(conn, "s2-restart_attn", 0)
    finally:
        front.stop()
