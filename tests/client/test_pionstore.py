"""pion.lmcache.PionStore against a real pion-server -w 2 (test_kvprefix_autoredirect in the original design),
and the same redirect logic in PrefixTransport (PionPromptCache, pion-llm)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
import torch

from pion import PionClient
from pion.client.prefix_transport import LayerFormats, PrefixTransport, StoreOutcome, stacked_rows
from pion.client.redirect import Redirect, parse_redirect
from pion.client.runtimes.transformers_kv import KvShape
from pion.lmcache import PionStore
from support.workers import WorkerGroup, start_workers

KV_DIM = 16


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGroup]:
    started = start_workers(tmp_path_factory.mktemp("w2"), 2)
    try:
        yield started
    finally:
        started.server.stop()


def layer_rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, KV_DIM)).astype(np.float32)


def test_parse_redirect_reads_the_worker_and_address() -> None:
    assert parse_redirect("V.FETCH session lives on worker 1 127.0.0.1:2075") == Redirect(1, "127.0.0.1", 2075)
    assert parse_redirect("session 'x' not found") is None


def test_store_and_fetch_round_trip_on_the_owner(group: WorkerGroup) -> None:
    k, v = layer_rows(5, 1), layer_rows(5, 2)
    with PionStore(port=group.ports[0], vquant="fp32") as store:
        store.register("ps|own", KV_DIM, n_layers=1)
        assert store.lookup("ps|own") is False
        assert store.store_layer("ps|own", "K", layer=0, token_offset=0, tensor_fp32=k) == 5
        assert store.store_layer("ps|own", "v", layer=0, token_offset=0, tensor_fp32=torch.from_numpy(v)) == 5
        assert store.lookup("ps|own") is True
        assert np.array_equal(store.fetch_layer("ps|own", "K", layer=0, start=1, end=4), k[1:4])
        assert np.array_equal(store.fetch_layer("ps|own", "V", layer=0, start=0, end=5), v)
        assert (store.redirects, store.worker()) == (0, 0)


def test_a_fetch_on_the_wrong_worker_is_redirected_once_and_counted(group: WorkerGroup) -> None:
    k = layer_rows(4, 3)
    with PionStore(port=group.ports[0], vquant="fp16") as writer:
        writer.register("ps|moved", KV_DIM, n_layers=1)
        writer.store_layer("ps|moved", "K", layer=0, token_offset=0, tensor_fp32=k)
        writer.store_layer("ps|moved", "V", layer=0, token_offset=0, tensor_fp32=k)
    with PionStore(port=group.ports[1], vquant="fp16") as reader:
        assert reader.lookup("ps|moved") is True  # answered by worker 1 from the directory
        fetched = reader.fetch_layer("ps|moved", "K", layer=0, start=0, end=4)
        assert np.array_equal(fetched, k.astype(np.float16).astype(np.float32))
        assert (reader.redirects, reader.worker()) == (1, 0)
        reader.fetch_layer("ps|moved", "V", layer=0, start=0, end=4)
        assert reader.redirects == 1  # now pinned to the owner
        assert reader.drop("ps|moved") is True
        assert reader.lookup("ps|moved") is False


def test_without_auto_redirect_the_error_reaches_the_caller(group: WorkerGroup) -> None:
    with PionStore(port=group.ports[1]) as writer:
        writer.register("ps|pinned", KV_DIM)
    with PionStore(port=group.ports[0], auto_redirect=False) as reader:
        with pytest.raises(redis.ResponseError) as info:
            reader.fetch_layer("ps|pinned", "K", layer=0, start=0, end=1)
        assert str(info.value) == f"V.FETCH session lives on worker 1 127.0.0.1:{group.ports[1]}"
        assert reader.redirects == 0
        assert reader.drop("ps|pinned") is True  # DROP reaches the owner from any worker


def test_bad_side_and_shape_are_refused_before_sending(group: WorkerGroup) -> None:
    with PionStore(port=group.ports[0]) as store:
        store.register("ps|bad", KV_DIM)
        with pytest.raises(ValueError, match="kind must be 'K' or 'V'"):
            store.store_layer("ps|bad", "Q", layer=0, token_offset=0, tensor_fp32=layer_rows(1, 0))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="registered with 16"):
            store.store_layer("ps|bad", "K", layer=0, token_offset=0, tensor_fp32=np.zeros((2, 8), np.float32))
        assert store.client.v_info("ps|bad_pk")["kv_dim"] == KV_DIM
        store.drop("ps|bad")


def test_prefix_transport_stores_and_restores_through_the_wrong_worker(group: WorkerGroup) -> None:
    shape = KvShape(n_layers=2, n_kv_heads=2, head_dim=8)
    gen = torch.Generator().manual_seed(0)
    dims = (shape.n_layers, shape.n_kv_heads, 3, shape.head_dim)
    keys, values = torch.randn(dims, generator=gen), torch.randn(dims, generator=gen)
    formats = LayerFormats.uniform("fp32", shape.n_layers)
    owner = PrefixTransport(PionClient(port=group.ports[1]), shape, formats)
    assert owner.store("ps|transport", stacked_rows(keys, values)) == StoreOutcome([], 4 * 3 * 16 * 4)
    again = PrefixTransport(PionClient(port=group.ports[0]), shape, formats)  # registers on worker 1
    assert (again.store("ps|transport", stacked_rows(keys, values)), again.client.redirects) == \
        (StoreOutcome([], 4 * 3 * 16 * 4), 1)
    again.client.close()
    other = PrefixTransport(PionClient(port=group.ports[0]), shape, formats)
    restored = other.restore("ps|transport", 3)
    assert (torch.equal(restored.stacked("k").float(), keys), torch.equal(restored.stacked("v").float(), values),
            other.client.redirects) == (True, True, 1)
    chain = PrefixTransport(PionClient(port=group.ports[0]), shape, formats).fetch_chain([("ps|transport", 3)])
    assert len(chain) == 1
    owner.client.close()
    other.client.close()


@pytest.mark.parametrize("family", ["jamba", "mamba2"])
def test_prompt_cache_restores_a_prefix_another_worker_holds(family: str, group: WorkerGroup,
                                                            tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from pion.client.prompt_cache import PionPromptCache
    from support.hybrid_models import save_tiny

    model = AutoModelForCausalLM.from_pretrained(save_tiny(family, tmp_path / family)).eval()
    prefix = list(range(3, 40))
    with PionPromptCache(model, vquant="fp32", port=group.ports[1]) as writer:
        writer.get_or_prefill(prefix)
        assert (writer.stats()["misses"], writer.stats()["store_failures"]) == (1, 0)
    with PionPromptCache(model, vquant="fp32", port=group.ports[0]) as reader:
        reader.get_or_prefill(prefix)
        assert (reader.stats()["hits"], reader.stats()["fallbacks"], reader.client.redirects) == (1, 0, 1)
