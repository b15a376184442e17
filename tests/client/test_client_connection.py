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
    assert client.kv_prefix_register(ns, 8, "fp32", layers=2, prefill_ms=12.5) is True
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
    assert client.kv_prefix_register_schema(ns, 8, ["fp16", "fp16"], ["fp16", "fp32"]) is True
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


def _unit(*head: float, dim: int = 8) -> np.ndarray:
    vec = np.array(list(head) + [0.0] * (dim - len(head)), dtype=np.float32)
    return vec / np.linalg.norm(vec)


def test_semantic_cache_commands_return_typed_values(client: PionClient) -> None:
    cache = "conn-semantic"
    first = client.semantic_set(cache, "s", "q1", '{"content": "a"}', meta='{"q": "q1"}', vector=_unit(1, 0))
    second = client.semantic_set(cache, "s", "q2", b"b", ttl_s=60, vector=_unit(0, 1))
    found = client.semantic_get(cache, "s", "ignored", threshold=0.9, vector=_unit(1, 0.01), with_best=True)
    assert found.hit is not None
    assert (found.hit.response, found.hit.entry_id, found.hit.meta) == (b'{"content": "a"}', first, b'{"q": "q1"}')
    assert round(found.hit.similarity, 4) == 1.0
    miss = client.semantic_get(cache, "s", "ignored", threshold=0.99, vector=_unit(1, 1), with_best=True,
                               with_vector=True)
    assert (miss.hit, round(miss.best_similarity or 0, 4)) == (None, 0.7071)
    assert miss.vector is not None
    assert np.round(miss.vector, 6).tolist() == np.round(_unit(1, 1), 6).tolist()  # re-normalised on the server
    assert client.semantic_get(cache, "other-scope", "x", vector=_unit(1, 0)).hit is None
    assert client.semantic_info(cache)["entries"] == 2
    assert (client.semantic_del(cache, second, 999), client.semantic_flush(cache)) == (1, 1)


def test_a_malformed_semantic_get_reply_is_a_value_error_not_an_index_error() -> None:
    from pion.client.commands import semantic_get

    with pytest.raises(ValueError) as info:
        semantic_get("c", "s", "t", with_vector=True).parse([b"answer", b"0.9"])
    assert str(info.value).startswith("malformed AI.SEMANTIC_CACHE GET reply: ")


def test_receipt_and_info_commands_are_dicts_with_numbers(client: PionClient) -> None:
    client.kv_prefix_register("conn-info", 4, "fp16", layers=1)
    assert client.v_storebatch("conn-info_pk", 0, 0, np.zeros((2, 4), np.float16).tobytes(), dtype="f16") == 2
    info = client.v_info("conn-info_pk")
    assert (info["kv_dim"], info["format"], info["tokens"]) == (4, "fp16", 2)
    assert type(client.pion_stats()["kvprefix_hits"]) is int
    assert type(client.kv_prefix_info()["registered_prefixes"]) is int
