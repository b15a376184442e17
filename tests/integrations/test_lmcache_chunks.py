"""The Pion side of the LMCache plugin (KvChunkStore) against a real pion-server.

No lmcache here: chunks are the ``[2, n_layers, n_tokens, kv_dim]`` tensors LMCache hands its
remote connectors (``MemoryFormat.KV_2LTD``), so these run in the normal test venv.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import torch

from pion.client.connection import PionClient
from pion.integrations.kv_chunks import ChunkGeometry, KvChunkStore, ModelKey, resolve_format
from support.procs import ServerProcess
from support.workers import start_workers

GEOMETRY = ChunkGeometry(n_layers=3, kv_dim=64, chunk_size=16, dtype=torch.float16)
MODEL = ModelKey("tiny/llama", world_size=1, worker_id=0, dtype="half")


@pytest.fixture
def client(pion_server: ServerProcess) -> Iterator[PionClient]:
    with PionClient("127.0.0.1", pion_server.port) as c:
        yield c


def chunk(n_tokens: int, seed: int, dtype: torch.dtype = torch.float16, geometry: ChunkGeometry = GEOMETRY) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(geometry.shape(n_tokens), generator=gen).to(dtype)


def restore(store: KvChunkStore, ns: str) -> torch.Tensor | None:
    fetched = store.fetch_many([ns])[0]  # type: ignore[list-item]
    if fetched is None:
        return None
    out = torch.empty(store.geometry.shape(fetched.n_tokens), dtype=store.geometry.dtype)
    store.copy_into(fetched, out)
    return out


def test_fp16_chunk_restores_bit_exact_from_a_second_client(client: PionClient, pion_server: ServerProcess) -> None:
    store = KvChunkStore(client, GEOMETRY)
    ns = store.chunk_namespace(MODEL, 0xABCDEF)
    original = chunk(16, seed=1)
    sent = store.put_many(MODEL, [(ns, original)])
    with PionClient("127.0.0.1", pion_server.port) as other:
        restored = restore(KvChunkStore(other, GEOMETRY), ns)
    assert store.format == "fp16"
    assert sent == original.numel() * 2
    assert restored is not None
    assert torch.equal(restored.view(torch.int16), original.view(torch.int16))


def test_bf16_chunks_are_stored_as_fp32_and_restore_bit_exact(client: PionClient) -> None:
    geometry = ChunkGeometry(2, 64, 8, torch.bfloat16)
    store = KvChunkStore(client, geometry)
    ns = store.chunk_namespace(MODEL, 7)
    original = chunk(8, seed=2, dtype=torch.bfloat16, geometry=geometry)
    store.put_many(MODEL, [(ns, original)])
    restored = restore(store, ns)
    assert store.format == "fp32"
    assert restored is not None
    assert torch.equal(restored.view(torch.int16), original.view(torch.int16))


def test_int8_chunks_take_about_half_the_bytes_and_restore_close(client: PionClient) -> None:
    exact = KvChunkStore(client, GEOMETRY, "fp16")
    small = KvChunkStore(client, GEOMETRY, "int8")
    original = chunk(16, seed=3)
    exact.put_many(MODEL, [(exact.chunk_namespace(MODEL, 1), original)])
    before = client.kv_prefix_info()["vstore_bytes"]
    small.put_many(MODEL, [(small.chunk_namespace(MODEL, 1), original)])
    int8_bytes = int(client.kv_prefix_info()["vstore_bytes"]) - int(before)
    restored = restore(small, small.chunk_namespace(MODEL, 1))
    assert small.chunk_namespace(MODEL, 1) != exact.chunk_namespace(MODEL, 1)
    assert int8_bytes < int(before) * 0.6
    assert restored is not None
    assert float((restored.float() - original.float()).abs().max()) < 0.05


def test_a_chunk_shorter_than_the_chunk_size_restores_with_its_own_length(client: PionClient) -> None:
    store = KvChunkStore(client, GEOMETRY)
    ns = store.chunk_namespace(MODEL, 99)
    original = chunk(5, seed=4)
    store.put_many(MODEL, [(ns, original)])
    fetched = store.fetch_many([ns])
    restored = restore(store, ns)
    assert fetched[0] is not None and fetched[0].n_tokens == 5
    assert restored is not None
    assert torch.equal(restored, original)


def test_count_leading_stops_at_the_first_missing_chunk(client: PionClient) -> None:
    store = KvChunkStore(client, GEOMETRY)
    names = [store.chunk_namespace(MODEL, h) for h in (10, 11, 12, 13)]
    store.put_many(MODEL, [(names[0], chunk(16, 5)), (names[1], chunk(16, 6)), (names[3], chunk(16, 7))])
    assert store.count_leading(names) == 2
    assert store.count_leading(names[2:]) == 0
    assert store.count_leading([]) == 0
    assert [f is None for f in store.fetch_many(names)] == [False, False, True, False]


def test_each_model_registers_a_manifest_and_lists_only_its_own_chunks(client: PionClient) -> None:
    store = KvChunkStore(client, GEOMETRY)
    other_model = ModelKey("other/model", 1, 0, "half")
    store.put_many(MODEL, [(store.chunk_namespace(MODEL, 1), chunk(16, 8)), (store.chunk_namespace(MODEL, 2), chunk(16, 9))])
    store.put_many(other_model, [(store.chunk_namespace(other_model, 1), chunk(16, 10))])
    manifest = client.key_get(f"lmc:{store.model_namespace(MODEL)}:model")
    assert manifest is not None
    assert json.loads(manifest) == {"version": 1, "model_name": "tiny/llama", "world_size": 1, "worker_id": 0,
                                    "dtype": "torch.float16", "n_layers": 3, "kv_dim": 64, "chunk_size": 16,
                                    "format": "fp16"}
    assert store.list_chunks(MODEL) == sorted([store.chunk_namespace(MODEL, 1), store.chunk_namespace(MODEL, 2)])
    assert store.list_chunks(other_model) == [store.chunk_namespace(other_model, 1)]


def test_tagged_keys_get_their_own_namespace(client: PionClient) -> None:
    store = KvChunkStore(client, GEOMETRY)
    plain = store.chunk_namespace(MODEL, 5)
    tagged = store.chunk_namespace(MODEL, 5, (("user", "a"),))
    assert tagged.startswith(plain + ":")
    assert len(tagged) == len(plain) + 17


def test_a_chunk_of_the_wrong_shape_is_refused_before_anything_is_sent(client: PionClient) -> None:
    store = KvChunkStore(client, GEOMETRY)
    good = store.chunk_namespace(MODEL, 1)
    with pytest.raises(ValueError, match=r"has shape \(2, 2, 16, 64\)"):
        store.put_many(MODEL, [(good, chunk(16, 1)), (store.chunk_namespace(MODEL, 2), torch.zeros(2, 2, 16, 64))])
    with pytest.raises(ValueError, match="with 1..16 tokens"):
        store.put_many(MODEL, [(good, chunk(17, 1))])
    assert client.kv_prefix_info()["registered_prefixes"] == 0
    assert client.key_get(f"lmc:{store.model_namespace(MODEL)}:model") is None


def test_a_refused_store_raises_names_the_chunk_and_leaves_nothing_readable(client: PionClient) -> None:
    store = KvChunkStore(client, GEOMETRY)
    ns = store.chunk_namespace(MODEL, 3)
    client.kv_prefix_register(ns, 32, "fp16")  # same name, another kv_dim: REGISTER is refused
    with pytest.raises(redis.ResponseError, match=f"storing LMCache chunk {ns} failed: prefix .* kv_dim 32"):
        store.put_many(MODEL, [(ns, chunk(16, 1))])
    assert store.count_leading([ns]) == 0
    assert store.fetch_many([ns]) == [None]


def test_drop_removes_both_sides_and_the_registration(client: PionClient) -> None:
    store = KvChunkStore(client, GEOMETRY)
    ns = store.chunk_namespace(MODEL, 4)
    store.put_many(MODEL, [(ns, chunk(16, 2))])
    assert store.drop([ns]) == 1
    assert store.drop([ns]) == 0
    assert store.fetch_many([ns]) == [None]


def test_unknown_formats_and_dtypes_without_an_exact_format_are_refused(client: PionClient) -> None:
    with pytest.raises(ValueError, match="unknown"):
        KvChunkStore(client, GEOMETRY, "fp12")
    with pytest.raises(ValueError, match="no exact Pion format for K/V dtype torch.float64"):
        resolve_format("auto", torch.float64)
    assert resolve_format("int8", torch.float64) == "int8"


def test_under_workers_a_reader_on_another_worker_follows_the_redirect_once(tmp_path: Path) -> None:
    group = start_workers(tmp_path / "pion-w2", 2)
    try:
        original = [chunk(16, seed=20 + i) for i in range(3)]
        with PionClient("127.0.0.1", group.ports[0]) as writer_client:
            writer = KvChunkStore(writer_client, GEOMETRY)
            names = [writer.chunk_namespace(MODEL, 500 + i) for i in range(3)]
            writer.put_many(MODEL, list(zip(names, original, strict=True)))
        with PionClient("127.0.0.1", group.ports[1]) as reader_client:
            reader = KvChunkStore(reader_client, GEOMETRY)
            assert reader.count_leading(names) == 3  # the directory answers on any worker
            restored = [restore(reader, ns) for ns in names]
            assert reader_client.redirects == 1
        with PionClient("127.0.0.1", group.ports[1]) as other_client:  # still on worker 1
            again = KvChunkStore(other_client, GEOMETRY).put_many(MODEL, [(names[0], original[0])])
            assert (other_client.redirects, other_client.kv_prefix_lookup(names[0])) == (0, True)
        assert again == original[0].numel() * 2  # held by worker 0 already: not a failure
        assert all(r is not None and torch.equal(r, o) for r, o in zip(restored, original, strict=True))
    finally:
        group.server.stop()
