"""PionClient's typed KV commands against a real pion-server (redis-py + hiredis underneath)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import redis

from pion import PionClient
from pion.client.block_hashes import block_table
from support.procs import ServerProcess, free_port


@pytest.fixture
def client(shared_pion_server: ServerProcess) -> Iterator[PionClient]:
    with PionClient(port=shared_pion_server.port) as conn:
        yield conn


def _rows(n: int, kv_dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, kv_dim)).astype(np.float32)


def test_register_store_lookup_and_mfetch_round_trip_fp32_rows(client: PionClient) -> None:
    ns = "conn-roundtrip"
    assert client.kv_prefix_register(ns, 8, "fp32", layers=2, prefill_ms=12.5) == b"OK"
    assert client.kv_prefix_lookup(ns) is False
    rows = [_rows(5, 8, seed) for seed in range(4)]
    pipe = client.pipeline()
    for i, side in enumerate((f"{ns}_pk", f"{ns}_pk", f"{ns}_pv", f"{ns}_pv")):
        pipe.v_storebatch(side, i % 2, 0, rows[i].tobytes())
    assert pipe.execute() == [5, 5, 5, 5]
    assert client.kv_prefix_lookup(ns) is True
    fetched = client.v_mfetch(f"{ns}_pv", 0, 2, 0, 5, dtype="f32")
    assert [np.frombuffer(b, np.float32).reshape(5, 8).tolist() for b in fetched] == [rows[2].tolist(),
                                                                                     rows[3].tolist()]
    assert client.v_fetch(f"{ns}_pk", 1, 1, 3) == rows[1][1:3].tobytes()


def test_f16_store_and_fetch_halve_the_bytes(client: PionClient) -> None:
    ns = "conn-f16"
    client.kv_prefix_register(ns, 4, "fp16")
    values = np.arange(8, dtype=np.float16).reshape(2, 4)
    assert client.v_storebatch(f"{ns}_pk", 0, 0, values.tobytes(), dtype="f16") == 2
    assert client.v_fetch(f"{ns}_pk", 0, 0, 2, dtype="f16") == values.tobytes()
    assert client.v_fetch(f"{ns}_pk", 0, 0, 2, dtype="raw") == values.tobytes()


def test_block_table_and_membership_come_back_as_registered(client: PionClient) -> None:
    ns = "conn-blocks"
    table = block_table(list(range(300)), block_size=64)
    client.kv_prefix_register(ns, 4, "fp16", blocks=table)
    assert client.kv_prefix_blocks(ns) == table
    probes = [table.hashes[1], 12345, table.hashes[3]]
    assert client.kv_prefix_membership(ns, probes) == [True, False, True]
    assert client.kv_prefix_blocks("conn-never-registered") is None


def test_schema_register_then_drop_frees_both_sides(client: PionClient) -> None:
    ns = "conn-schema"
    assert client.kv_prefix_register_schema(ns, 8, ["fp16", "fp16"], ["fp16", "fp32"]) == b"OK"
    for side in ("pk", "pv"):
        for layer in range(2):
            client.v_storebatch(f"{ns}_{side}", layer, 0, _rows(3, 8, layer).tobytes())
    assert client.kv_prefix_lookup(ns) is True
    assert client.kv_prefix_drop(ns, "conn-not-held") == 1
    assert client.kv_prefix_lookup(ns) is False


def test_stats_and_info_are_dicts_of_numbers(client: PionClient) -> None:
    stats = client.pion_stats()
    assert len(stats) == 16
    assert isinstance(stats["kvprefix_hits"], int)
    assert isinstance(client.kv_prefix_info()["registered_prefixes"], int)


def test_a_refused_command_raises_response_error_and_the_connection_stays_usable(client: PionClient) -> None:
    with pytest.raises(redis.ResponseError):
        client.v_fetch("conn-missing_pk", 0, 0, 1)
    assert client.ping() is True


def test_a_server_that_is_not_there_raises_connection_error_at_once() -> None:
    with PionClient(port=free_port()) as conn, pytest.raises(redis.ConnectionError):
        conn.ping()
