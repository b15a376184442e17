"""Clients honour +DEFERRED (pion-server --admission 2hit): the prefix transport sends no rows for
a deferred prefix, PionPromptCache (hybrids too) and pion-llm's segment store keep their local
prefill and count the deferral, the second sighting is stored as usual, and a RAG chunk ingest
(``ADMIT``) is never deferred."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from pion import PionClient, PionPromptCache
from pion.client.prefix_transport import LayerFormats, PrefixTransport, stacked_rows
from pion.client.runtimes.transformers_kv import KvShape
from pion.llm.segments import ChainLink, ModelShape, SegmentKV, child_namespace, root_namespace
from pion.llm.stores import PionSegmentStore
from support.procs import ServerProcess, start_server

SHAPE = KvShape(n_layers=2, n_kv_heads=2, head_dim=8)


@pytest.fixture(scope="module")
def two_hit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("two-hit"), "--admission", "2hit")
    try:
        yield proc
    finally:
        proc.stop()


def _segment(n_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n_tokens)
    dims = (SHAPE.n_layers, SHAPE.n_kv_heads, n_tokens, SHAPE.head_dim)
    return torch.randn(dims, generator=gen), torch.randn(dims, generator=gen)


def test_register_reply_is_false_for_deferred(two_hit_server: ServerProcess) -> None:
    with PionClient(port=two_hit_server.port) as client:
        assert [client.kv_prefix_register("reg", 4, "fp16"), client.kv_prefix_register("reg", 4, "fp16")] == [
            False, True]


def test_transport_sends_no_rows_for_a_deferred_prefix_and_stores_the_second_time(
        two_hit_server: ServerProcess) -> None:
    keys, values = _segment(3)
    with PionClient(port=two_hit_server.port) as client:
        transport = PrefixTransport(client, SHAPE, LayerFormats.uniform("fp16", SHAPE.n_layers))
        assert transport.store("t-2hit", stacked_rows(keys, values)) == ([], 0, True)
        assert client.redis.execute_command("V.LIST", "t-2hit*") == []
        assert transport.store("t-2hit", stacked_rows(keys, values)) == ([], 2 * 2 * 3 * 16 * 2, False)
        assert client.kv_prefix_lookup("t-2hit") is True
        restored = transport.restore("t-2hit", 3)
    assert torch.equal(restored.stacked("k").float(), keys.half().float()) is True


def test_pion_llm_segment_store_counts_a_deferral_and_stores_the_next_sighting(
        two_hit_server: ServerProcess) -> None:
    shape = ModelShape(SHAPE.n_layers, SHAPE.n_kv_heads, SHAPE.head_dim, model_id="toy@2hit")
    store = PionSegmentStore(shape, "fp16", port=two_hit_server.port)
    link = ChainLink(child_namespace(root_namespace(shape, "fp16"), [1, 2, 3, 4]), None, 4, 0)
    rows = SegmentKV(*_segment(4))
    assert [store.store(link, rows), store.deferred, store.fetch_chain([link])] == [False, 1, []]
    assert [store.store(link, rows), store.deferred, len(store.fetch_chain([link]))] == [True, 1, 1]
    assert store.status()["deferred"] == 1


@pytest.mark.slow  # SmolLM2: the shared model fixture, then ~1.3 s of prefills
def test_prompt_cache_prefills_locally_on_deferred_then_stores_then_hits(
        smollm: tuple[Any, Any], two_hit_server: ServerProcess, tmp_path: Path) -> None:
    model, tok = smollm
    ids = tok("You are a helpful assistant for the 2-hit admission test.")["input_ids"]
    with PionPromptCache(model, vquant="fp16", port=two_hit_server.port, tokenizer=tok) as pc:
        for _ in range(3):
            pc.get_or_prefill(ids)
        stats = pc.stats()
    assert (stats["misses"], stats["hits"], stats["deferred"], stats["store_failures"]) == (2, 1, 1, 0)


def test_rag_chunk_ingest_is_never_deferred(two_hit_server: ServerProcess) -> None:
    from pion.client.chunk_store import ChunkKv, PionChunkStore

    keys, values = _segment(5)
    chunk = ChunkKv([k.unsqueeze(0) for k in keys], [v.unsqueeze(0) for v in values], [1, 2, 3, 4, 5], 0)
    with PionClient(port=two_hit_server.port) as client:
        store = PionChunkStore(client, SHAPE, "fp16")
        store.put("chunk-1", chunk)  # type: ignore[arg-type]
        [got] = store.get_many([("chunk-1", 0)])  # type: ignore[list-item]
    assert got is not None
    assert torch.equal(got.keys[1][0], keys[1].half().float()) is True


@pytest.mark.slow  # transformers + a tiny Jamba: ~20 s on the loaded 2-core box
def test_a_hybrid_prefix_deferred_keeps_nothing_and_counts_a_deferral(
        two_hit_server: ServerProcess, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from support.hybrid_models import save_tiny

    model = AutoModelForCausalLM.from_pretrained(save_tiny("jamba", tmp_path / "jamba")).eval()
    prefix = list(range(3, 20))
    with PionPromptCache(model, vquant="fp32", port=two_hit_server.port) as pc:
        pc.get_or_prefill(prefix)
        ns = pc.namespace_for(prefix)
        assert pc.client is not None
        held = (pc.client.redis.execute_command("V.LIST", f"{ns}*"),
                pc.client.redis.execute_command("SSM.PREFIX.FETCH", ns, 0))
        pc.get_or_prefill(prefix)
        pc.get_or_prefill(prefix)
        stats = pc.stats()
    assert held == ([], None)
    assert (stats["deferred"], stats["store_failures"], stats["hits"], stats["misses"]) == (1, 0, 1, 2)
