"""HybridRetrievalCache: exact RoPE re-rotation, single-chunk prepare == full prefill, multi-chunk
composition, partial recompute, and the pion backend through a real pion-server.

Fast tests use a tiny random-weight Llama; the SmolLM2 ones are marked slow.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pion.client.connection import PionClient
from pion.client.retrieval_cache import HybridRetrievalCache
from pion.client.rope import KeyRotator, UnsupportedRope
from pion.client.runtimes.transformers_runtime import forward_logits, prefill
from support.procs import ServerProcess
from support.tiny_llama import tiny_llama

CHUNK_A = [5, 6, 7, 8, 9, 10, 11]
CHUNK_B = [20, 21, 22, 23, 24]
CHUNK_C = [40, 41, 42]
SUFFIX = [60, 61, 62]


def rope_llama(rope: dict[str, Any] | None = None) -> Any:
    """The tiny Llama with three layers and the given RoPE scaling (plain RoPE by default)."""
    return tiny_llama(n_layers=3, rope=rope or {"rope_type": "default", "rope_theta": 10000.0})


@pytest.fixture(scope="module")
def llama() -> Any:
    return rope_llama()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def cache_diff(cache: Any, other: Any, side: str = "keys") -> float:
    return max(max_diff(getattr(x, side), getattr(y, side)) for x, y in zip(cache.layers, other.layers, strict=True))


@torch.inference_mode()
def prefill_at(model: Any, ids: list[int], offset: int) -> Any:
    """A chunk prefilled alone but at positions offset.. (what composition must reproduce)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([ids]), position_ids=torch.arange(offset, offset + len(ids))[None],
          cache=cache, use_cache=True)
    return cache


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64, "rope_theta": 10000.0}


@pytest.mark.parametrize("rope", [None, YARN, LLAMA3], ids=["default", "yarn", "llama3"])
def test_rerotating_a_roped_key_by_delta_equals_roping_it_at_the_new_position(rope: dict[str, Any] | None) -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = rope_llama(rope)
    rotator = KeyRotator(model)
    rotary = model.model.rotary_emb
    k = torch.randn(1, 2, 6, 16)

    def model_rope(positions: torch.Tensor) -> torch.Tensor:  # exactly what attention applies (scaled)
        cos, sin = rotary(k, positions[None])
        return apply_rotary_pos_emb(k, k, cos, sin)[1]

    p1 = torch.arange(3, 9)
    for delta in (37, -3, 150):
        assert max_diff(rotator.rotate(model_rope(p1), delta), model_rope(p1 + delta)) < 1e-5


def test_yarn_attention_scaling_is_applied_once_not_twice() -> None:
    rotator = KeyRotator(rope_llama(YARN))
    assert rotator.attention_scaling == pytest.approx(1.1386294361)
    k = torch.randn(1, 2, 4, 16)
    assert torch.linalg.vector_norm(rotator.rotate(k, 10), dim=-1).sub(
        torch.linalg.vector_norm(k, dim=-1)).abs().max().item() < 1e-5  # a pure rotation keeps norms


def test_dynamic_ntk_rope_is_refused_with_a_clear_error() -> None:
    with pytest.raises(UnsupportedRope) as exc:
        HybridRetrievalCache(rope_llama({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}))
    assert str(exc.value).startswith("rope_type 'dynamic' recomputes its frequencies from the sequence length")


def test_a_model_with_recurrent_layers_is_refused_with_the_reason() -> None:
    from transformers import AutoModelForCausalLM

    from support.hybrid_models import tiny_config

    with pytest.raises(ValueError) as exc:
        HybridRetrievalCache(AutoModelForCausalLM.from_config(tiny_config("lfm2")))
    assert str(exc.value).startswith("the model has recurrent (SSM / linear-attention) layers")


def test_prepare_of_one_chunk_gives_the_logits_of_a_full_prefill_of_chunk_and_suffix(llama: Any) -> None:
    hr = HybridRetrievalCache(llama)
    hr.ingest("a", CHUNK_A)
    cache, suffix = hr.prepare("a", SUFFIX)
    assert suffix == SUFFIX
    restored, _ = forward_logits(llama, suffix, cache)
    full, _ = forward_logits(llama, CHUNK_A + SUFFIX, None)
    assert max_diff(restored, full) < 1e-5
    assert cache_diff(cache, prefill(llama, CHUNK_A + SUFFIX), "values") < 1e-5


def test_prepare_returns_a_fresh_cache_each_time(llama: Any) -> None:
    hr = HybridRetrievalCache(llama)
    hr.ingest("a", CHUNK_A)
    first, _ = hr.prepare("a", SUFFIX)
    forward_logits(llama, SUFFIX, first)  # extends the first cache
    second, _ = hr.prepare("a", SUFFIX)
    assert (first.get_seq_length(), second.get_seq_length()) == (len(CHUNK_A) + len(SUFFIX), len(CHUNK_A))


def test_composed_chunks_equal_each_chunk_prefilled_alone_at_its_final_position(llama: Any) -> None:
    hr = HybridRetrievalCache(llama)
    for name, ids in (("a", CHUNK_A), ("b", CHUNK_B), ("c", CHUNK_C)):
        hr.ingest(name, ids)
    cache, _ = hr.prepare_multi(["c", "a", "b"], SUFFIX)
    offset = 0
    for ids in (CHUNK_C, CHUNK_A, CHUNK_B):
        alone = prefill_at(llama, ids, offset)
        for layer, reference in zip(cache.layers, alone.layers, strict=True):
            assert max_diff(layer.keys[:, :, offset:offset + len(ids)], reference.keys) < 1e-5
            assert max_diff(layer.values[:, :, offset:offset + len(ids)], reference.values) < 1e-5
        offset += len(ids)
    assert hr.composed_ids(["c", "a", "b"]) == CHUNK_C + CHUNK_A + CHUNK_B


def test_packs_follow_the_shared_stub_and_compose_after_it(llama: Any) -> None:
    stub = [1, 2, 3, 4]
    hr = HybridRetrievalCache(llama)
    hr.set_shared_stub(stub)
    hr.ingest_pack("p1", CHUNK_A)
    hr.ingest_pack("p2", CHUNK_B)
    cache, _ = hr.prepare_multi(["p2", "p1"], SUFFIX)
    assert hr.composed_ids(["p2", "p1"]) == stub + CHUNK_B + CHUNK_A
    # p2 sits right after the stub, where it was prefilled: exactly the stub + p2 prefill.
    reference = prefill(llama, stub + CHUNK_B)
    n = len(stub) + len(CHUNK_B)
    assert max(max_diff(a.keys[:, :, :n], b.keys) for a, b in zip(cache.layers, reference.layers, strict=True)) < 1e-5


def test_full_recompute_reproduces_a_full_prefill_exactly(llama: Any) -> None:
    hr = HybridRetrievalCache(llama, recompute_ratio=1.0, recompute_layer=0)
    hr.ingest("a", CHUNK_A)
    hr.ingest("b", CHUNK_B)
    cache, _ = hr.prepare_multi(["a", "b"], SUFFIX)
    full = prefill(llama, CHUNK_A + CHUNK_B)
    assert cache_diff(cache, full, "keys") < 1e-5
    assert cache_diff(cache, full, "values") < 1e-5


def test_partial_recompute_moves_the_composed_cache_toward_the_full_prefill(llama: Any) -> None:
    plain = HybridRetrievalCache(llama)
    blended = HybridRetrievalCache(llama, recompute_ratio=0.3, recompute_layer=1)
    for hr in (plain, blended):
        hr.ingest("a", CHUNK_A)
        hr.ingest("b", CHUNK_B)
    full = prefill(llama, CHUNK_A + CHUNK_B)
    before = cache_diff(plain.prepare_multi(["a", "b"], SUFFIX)[0], full, "values")
    after = cache_diff(blended.prepare_multi(["a", "b"], SUFFIX)[0], full, "values")
    assert after < before


def test_bad_calls_are_refused_with_the_reason(llama: Any) -> None:
    hr = HybridRetrievalCache(llama)
    hr.ingest("a", CHUNK_A)
    with pytest.raises(KeyError) as missing:
        hr.prepare_multi(["a", "nope"], SUFFIX)
    assert missing.value.args[0] == "not held (never ingested, evicted, or server unreachable): ['nope']"
    with pytest.raises(ValueError) as too_many:
        hr.prepare_multi(["a"] * 9, SUFFIX)
    assert str(too_many.value) == "9 packs exceed max_packs=8; compose fewer, coarser packs"
    with pytest.raises(ValueError) as no_stub:
        hr.ingest_pack("p", CHUNK_A)
    assert str(no_stub.value) == "ingest_pack needs set_shared_stub() first"
    with pytest.raises(ValueError) as empty:
        hr.ingest("e", [])
    assert str(empty.value) == "token_ids is empty"
    with pytest.raises(ValueError) as backend:
        HybridRetrievalCache(llama, backend="disk")  # type: ignore[arg-type]
    assert str(backend.value) == "backend must be 'inproc' or 'pion', got 'disk'"


def test_pion_backend_shares_chunks_between_independent_caches(llama: Any, pion_server: ServerProcess) -> None:
    with PionClient(port=pion_server.port) as writer_client, PionClient(port=pion_server.port) as reader_client:
        writer = HybridRetrievalCache(llama, backend="pion", client=writer_client)
        writer.ingest("a", CHUNK_A)
        writer.ingest("b", CHUNK_B)
        # A reader with no local state (as in another process) finds both by id.
        reader = HybridRetrievalCache(llama, backend="pion", client=reader_client)
        local = HybridRetrievalCache(llama)
        local.ingest("a", CHUNK_A)
        local.ingest("b", CHUNK_B)
        remote_cache, _ = reader.prepare_multi(["b", "a"], SUFFIX)
        local_cache, _ = local.prepare_multi(["b", "a"], SUFFIX)
        assert cache_diff(remote_cache, local_cache, "keys") < 2e-3  # fp16 at rest
        assert cache_diff(remote_cache, local_cache, "values") < 2e-3
        single, _ = reader.prepare("a", SUFFIX)
        restored, _ = forward_logits(llama, SUFFIX, single)
        full, _ = forward_logits(llama, CHUNK_A + SUFFIX, None)
        assert int(restored.argmax()) == int(full.argmax())
        assert max_diff(restored, full) < 1e-2


def test_pion_backend_reports_an_evicted_chunk_as_not_held(llama: Any, pion_server: ServerProcess) -> None:
    with PionClient(port=pion_server.port) as client:
        hr = HybridRetrievalCache(llama, backend="pion", client=client)
        hr.ingest("a", CHUNK_A)
        client.kv_prefix_drop(hr.namespace_for("a"))
        with pytest.raises(KeyError):
            hr.prepare("a", SUFFIX)


@pytest.mark.slow
def test_smollm2_single_chunk_prepare_matches_text_rag_logits(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    passage = tok.encode("The Eiffel Tower is 330 metres tall and stands in Paris, France.")
    question = tok.encode("\nQuestion: How tall is the Eiffel Tower?\nAnswer:")
    hr = HybridRetrievalCache(model)
    hr.ingest("eiffel", passage)
    cache, suffix = hr.prepare("eiffel", question)
    restored, _ = forward_logits(model, suffix, cache)
    full, _ = forward_logits(model, passage + question, None)
    assert max_diff(restored, full) < 1e-3
    assert int(restored.argmax()) == int(full.argmax())


@pytest.mark.slow
def test_smollm2_rerotated_chunk_matches_the_chunk_prefilled_at_its_position(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    first, second = tok.encode("Mount Everest is 8849 metres high."), tok.encode("The Nile is a long river.")
    hr = HybridRetrievalCache(model)
    hr.ingest("everest", first)
    hr.ingest("nile", second)
    cache, _ = hr.prepare_multi(["everest", "nile"], tok.encode("\nAnswer:"))
    alone = prefill_at(model, second, len(first))
    n = len(first)
    assert max(max_diff(a.keys[:, :, n:], b.keys) for a, b in zip(cache.layers, alone.layers, strict=True)) < 1e-3


def test_pion_backend_quantized_chunks_come_back_as_the_servers_fp16_decode(
        llama: Any, pion_server: ServerProcess) -> None:
    import numpy as np

    from pion.common.ids import k_session, v_session

    with PionClient(port=pion_server.port) as writer_client, PionClient(port=pion_server.port) as reader_client:
        writer = HybridRetrievalCache(llama, backend="pion", vquant="int8", client=writer_client)
        writer.ingest("a", CHUNK_A)
        reader = HybridRetrievalCache(llama, backend="pion", vquant="int8", client=reader_client)
        ns = reader.namespace_for("a")
        [chunk] = reader.store.get_many([(ns, 0)])
        assert chunk is not None and chunk.token_ids == CHUNK_A
        n, layers = len(CHUNK_A), llama.config.num_hidden_layers
        for sid, got in ((k_session(ns), chunk.keys), (v_session(ns), chunk.values)):
            for layer, blob in enumerate(reader_client.v_mfetch(sid, 0, layers, 0, n, dtype="f16")):
                want = torch.from_numpy(np.frombuffer(blob, dtype="<f2").copy())
                assert got[layer].dtype == torch.float16
                assert torch.equal(got[layer].transpose(1, 2).reshape(-1), want)
