"""The ATTEND binary lane under ``pion-server -w 2``: a shared lane port and each worker's own lane
address (PION.WORKER ``binary_addresses``); a frame naming a session another worker holds answers
the RESP side's redirect error with the owner's *lane* address, where the same frame succeeds;
``BinaryLaneClient`` follows that redirect once and remembers the owner. With ``--cold-tier`` (a real
3-master Redis Cluster, ~5 s) the lane is on too, and its cold-tier variants redirect the same way."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis

from pion.client.redirect import parse_redirect
from pion.client.stage2.binary_client import BinaryLaneClient, BinaryLaneError
from pion.common.binary_frames import (
    CMD_ATTEND_PREFIX_LOOKUP, CMD_ATTEND_PREFIX_QUERY, CMD_KV_PREFIX_WARM, CMD_PING, STATUS_ERR, STATUS_OK,
    encode_request, parse_reply_header,
)
from support.procs import ServerProcess, free_port, start_server
from support.redis_cluster import cluster_tools_missing, start_cluster
from support.workers import WorkerGroup, start_workers, worker_info

K = np.arange(2 * 3 * 4, dtype="<f4").reshape(2, 3, 4)  # H=2, N=3 tokens, D=4


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGroup]:
    started = start_workers(tmp_path_factory.mktemp("wbin"), 2, "--binary-port", str(free_port()))
    try:
        yield started
    finally:
        started.server.stop()


def read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def call(address: str, command: int, fields: list[bytes]) -> tuple[int, bytes]:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"".join(bytes(p) for p in encode_request(command, 1, fields)))
        status, _, n = parse_reply_header(read_exact(sock, 12))
        return status, read_exact(sock, n)


def lanes(group: WorkerGroup) -> list[str]:
    with group.worker(0) as conn:
        found = worker_info(conn)["binary_addresses"]
    assert isinstance(found, list)
    return [str(a) for a in found]


def test_each_worker_names_its_own_lane_address_and_every_lane_answers(group: WorkerGroup) -> None:
    shown = []
    for index in (0, 1):
        with group.worker(index) as conn:
            info = worker_info(conn)
            shown.append((info["binary_address"], conn.info("server")["binary_port"]))
    addresses = lanes(group)
    shared = int(group.server.extra_args[group.server.extra_args.index("--binary-port") + 1])
    assert shown == [(addresses[0], shared), (addresses[1], shared)]
    assert len(set(addresses)) == 2
    for address in (*addresses, f"127.0.0.1:{shared}"):
        assert call(address, CMD_PING, []) == (STATUS_OK, b"PONG")


def test_a_session_on_worker_1_redirects_a_frame_on_worker_0_to_worker_1s_lane(group: WorkerGroup) -> None:
    with group.worker(1) as w1:
        assert w1.execute_command("ATTEND.PREFIX.STORE", "wbin|s", 0, 2, 3, 4, K.tobytes(), K.tobytes()) == b"OK"
    addresses = lanes(group)
    status, body = call(addresses[0], CMD_ATTEND_PREFIX_LOOKUP, [b"wbin|s", b"0"])
    assert (status, body) == (STATUS_ERR, f"ERR ATTEND.PREFIX.LOOKUP session lives on worker 1 {addresses[1]}".encode())
    redirect = parse_redirect(body.decode()[4:])
    assert redirect is not None and f"{redirect.host}:{redirect.port}" == addresses[1]
    assert call(addresses[1], CMD_ATTEND_PREFIX_LOOKUP, [b"wbin|s", b"0"]) == (STATUS_OK, b"HIT")
    query = [b"wbin|s", b"0", b"2", b"4", b"0", np.ones((2, 1, 4), dtype="<f4").tobytes()]
    with group.worker(1) as w1:
        resp = w1.execute_command("ATTEND.PREFIX.QUERY", *query)
    assert call(addresses[1], CMD_ATTEND_PREFIX_QUERY, query) == (STATUS_OK, resp)
    assert call(addresses[0], CMD_ATTEND_PREFIX_QUERY, query) == (
        STATUS_ERR, f"ERR ATTEND.PREFIX.QUERY session lives on worker 1 {addresses[1]}".encode())


def fused_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q ``[H_q=2, M=1, D=4]`` and a one-token local K/V ``[H_kv=2, 1, 4]`` for QUERY_FUSED."""
    q = np.linspace(-1.0, 1.0, 8, dtype="<f4").reshape(2, 1, 4)
    return q, np.full((2, 1, 4), 0.5, dtype="<f4"), np.full((2, 1, 4), -0.25, dtype="<f4")


def lane_client(address: str, follow_redirects: bool = True) -> BinaryLaneClient:
    host, port = address.rsplit(":", 1)
    return BinaryLaneClient(host, int(port), follow_redirects=follow_redirects)


def test_the_lane_client_follows_the_redirect_to_the_owner_once_and_then_goes_there_directly(
        group: WorkerGroup) -> None:
    with group.worker(0) as w0:
        assert w0.execute_command("ATTEND.PREFIX.STORE", "wbin|f", 0, 2, 3, 4, K.tobytes(), (K + 1).tobytes()) == b"OK"
    addresses = lanes(group)
    owner = lane_client(addresses[0])
    want = owner.query_fused("wbin|f", 0, *fused_inputs())
    owner.close()
    client = lane_client(addresses[1])
    try:
        assert client.query_fused("wbin|f", 0, *fused_inputs()) == want
        host, port = addresses[0].rsplit(":", 1)
        assert (client.redirects, client.owner_of("wbin|f")) == (1, (host, int(port)))
        assert client.query_fused("wbin|f", 0, *fused_inputs()) == want
        assert client.redirects == 1  # remembered: the second frame went to the owner directly
        assert client.call(CMD_PING, []) == b"PONG"  # a frame without a session stays on the first address
    finally:
        client.close()


def test_with_follow_redirects_off_the_lane_client_raises_the_redirect(group: WorkerGroup) -> None:
    with group.worker(0) as w0:
        assert w0.execute_command("ATTEND.PREFIX.STORE", "wbin|n", 0, 2, 3, 4, K.tobytes(), K.tobytes()) == b"OK"
    addresses = lanes(group)
    client = lane_client(addresses[1], follow_redirects=False)
    try:
        with pytest.raises(BinaryLaneError) as raised:
            client.query_fused("wbin|n", 0, *fused_inputs())
        assert str(raised.value) == f"ERR ATTEND.PREFIX.QUERY_FUSED session lives on worker 0 {addresses[0]}"
        assert (client.redirects, client.owner_of("wbin|n")) == (0, None)
    finally:
        client.close()


def test_a_remembered_owner_that_does_not_answer_raises_a_lane_error_and_the_first_connection_still_works(
        group: WorkerGroup) -> None:
    with group.worker(0) as w0:
        assert w0.execute_command("ATTEND.PREFIX.STORE", "wbin|d", 0, 2, 3, 4, K.tobytes(), K.tobytes()) == b"OK"
    addresses = lanes(group)
    client = lane_client(addresses[1])
    dead = free_port()  # nothing listens there
    try:
        client._remember(b"wbin|d", ("127.0.0.1", dead))
        with pytest.raises(BinaryLaneError) as raised:
            client.query_fused("wbin|d", 0, *fused_inputs())
        assert str(raised.value).startswith(f"the owner's binary lane at 127.0.0.1:{dead} failed (")
        assert client.call(CMD_PING, []) == b"PONG"  # the first connection is unharmed
    finally:
        client.close()


# ---- the lane under -w 2 with --cold-tier (a real Redis Cluster) ---------------------------------
H2, D2, LAYERS2, TOKENS2 = 3, 64, 2, 16


@pytest.fixture(scope="module")
def cold_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGroup, ServerProcess]]:
    """A 3-master cluster, a -w 2 --cold-tier server with the lane, and a single-process front of
    the same cluster (what wrote a prefix the workers only find in the cold tier)."""
    missing = cluster_tools_missing()
    if missing is not None:
        pytest.skip(missing)
    base = tmp_path_factory.mktemp("wcold")
    cluster = start_cluster(base / "cluster", masters=3, replicas=0)
    started: list[Any] = []
    try:
        started.append(start_workers(base / "workers", 2, "--cold-tier", cluster.url, "--binary-port",
                                     str(free_port())))
        started.append(start_server(base / "front", "--cold-tier", cluster.url, "--binary-port", str(free_port())))
        yield started[0], started[1]
    finally:
        for item in started:
            (item.server if isinstance(item, WorkerGroup) else item).stop()
        cluster.stop()


def store_rows(conn: redis.Redis, ns: str, seed: int) -> None:
    """Stage 1's store (REGISTER + both sides of every layer, fp16 rows)."""
    assert conn.execute_command("KV.PREFIX.REGISTER", ns, H2 * D2, "fp16", "LAYERS", LAYERS2) == b"OK"
    rng = np.random.default_rng(seed)
    for side in ("pk", "pv"):
        for layer in range(LAYERS2):
            rows = rng.standard_normal((TOKENS2, H2 * D2)).astype(np.float16)
            assert conn.execute_command("V.STOREBATCH", f"{ns}_{side}", layer, 0, rows.tobytes(),
                                        "DTYPE", "f16") == TOKENS2


def cold_fused_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return tuple(rng.standard_normal((H2, 1, D2)).astype("<f4") for _ in range(3))  # type: ignore[return-value]


def warm_frame(ns: str) -> list[bytes]:
    return [ns.encode(), b"%d" % H2, b"%d" % D2, f"{ns}_attn".encode()]


def test_with_cold_tier_the_lane_is_on_and_a_frame_on_the_wrong_worker_is_redirected_to_the_owner(
        cold_group: tuple[WorkerGroup, ServerProcess]) -> None:
    group, _ = cold_group
    addresses = lanes(group)
    assert len(addresses) == 2
    with group.worker(0) as w0:
        store_rows(w0, "wc|own", seed=1)
        assert w0.execute_command("KV.PREFIX.WARM", "wc|own", H2, D2, "wc|own_attn") == b"%d" % LAYERS2
    owner = lane_client(addresses[0])
    want = owner.query_fused("wc|own_attn", 1, *cold_fused_inputs())
    owner.close()
    # the cold tier's sync LOOKUP and WARM (the lane's own variants) are routed like the rest:
    # worker 1 does not answer its own MISS for worker 0's prefix, it names worker 0's lane
    strict = lane_client(addresses[1], follow_redirects=False)
    try:
        with pytest.raises(BinaryLaneError) as lookup:
            strict.call(CMD_ATTEND_PREFIX_LOOKUP, [b"wc|own_attn", b"0"])
        with pytest.raises(BinaryLaneError) as warm:
            strict.call(CMD_KV_PREFIX_WARM, warm_frame("wc|own"))
        assert (str(lookup.value), str(warm.value)) == (
            f"ERR ATTEND.PREFIX.LOOKUP session lives on worker 0 {addresses[0]}",
            f"ERR KV.PREFIX.WARM session lives on worker 0 {addresses[0]}")
    finally:
        strict.close()
    client = lane_client(addresses[1])
    try:
        assert client.call(CMD_ATTEND_PREFIX_LOOKUP, [b"wc|own_attn", b"0"]) == b"HIT"
        assert client.query_fused("wc|own_attn", 1, *cold_fused_inputs()) == want
        assert client.redirects == 1
    finally:
        client.close()


def test_a_prefix_only_the_cold_tier_holds_is_promoted_over_resp_and_the_lane_follows_to_that_worker(
        cold_group: tuple[WorkerGroup, ServerProcess]) -> None:
    group, front = cold_group
    with front.client() as other:
        store_rows(other, "wc|cold", seed=2)
        assert other.execute_command("KV.PREFIX.WARM", "wc|cold", H2, D2, "wc|cold_attn") == b"%d" % LAYERS2
    front_lane = BinaryLaneClient("127.0.0.1", int(front.extra_args[front.extra_args.index("--binary-port") + 1]))
    want = front_lane.query_fused("wc|cold_attn", 0, *cold_fused_inputs())
    front_lane.close()
    addresses = lanes(group)
    with group.worker(1) as w1:  # PionPromptCache's order: LOOKUP (promotes into worker 1), then WARM
        assert w1.execute_command("KV.PREFIX.LOOKUP", "wc|cold") == b"HIT"
        assert w1.execute_command("KV.PREFIX.WARM", "wc|cold", H2, D2, "wc|cold_attn") == b"%d" % LAYERS2
    client = lane_client(addresses[0])
    try:
        assert client.query_fused("wc|cold_attn", 0, *cold_fused_inputs()) == want
        host, port = addresses[1].rsplit(":", 1)
        assert (client.redirects, client.owner_of("wc|cold_attn")) == (1, (host, int(port)))
    finally:
        client.close()
