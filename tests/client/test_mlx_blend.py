"""CacheBlend-style partial recompute on MLX (``HybridRetrievalCache(mlx_model, recompute_ratio=…)``):
ratio 1.0 gives a full prefill's K/V, a smaller ratio recomputes exactly that share of the moved
tokens and leaves the others' deeper layers as they were, and non-Llama layouts are refused.

Tiny randomly initialised mlx-lm models built in the test (no weights); a few seconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
cache_mod = pytest.importorskip("mlx_lm.models.cache", reason="mlx-lm is not installed")

from mlx_lm.models import gemma3_text, llama  # noqa: E402

from pion import HybridRetrievalCache  # noqa: E402
from pion.client.runtimes import mlx_blend  # noqa: E402

CHUNK_A = [5, 17, 3, 99, 42, 7, 64, 11, 23, 8]
CHUNK_B = [1, 77, 9, 14, 33, 2, 61, 18, 40, 4, 90, 27]
SUFFIX = [12, 13]


@pytest.fixture(scope="module")
def tiny_llama() -> Any:
    mx.random.seed(21)
    model = llama.Model(llama.ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=3,
                                        intermediate_size=128, num_attention_heads=4, rms_norm_eps=1e-5,
                                        vocab_size=128, num_key_value_heads=2, head_dim=16))
    mx.eval(model.parameters())
    return model


def full_prefill(model: Any, ids: list[int]) -> list[Any]:
    cache = cache_mod.make_prompt_cache(model)
    model(mx.array([ids]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def max_diff(a: Any, b: Any) -> float:
    return float(np.abs(np.array(a.astype(mx.float32)) - np.array(b.astype(mx.float32))).max())


def test_ratio_one_recomputes_the_moved_chunk_into_a_full_prefills_keys_and_values(tiny_llama: Any) -> None:
    with HybridRetrievalCache(tiny_llama, recompute_ratio=1.0) as blended, HybridRetrievalCache(tiny_llama) as plain:
        for hr in (blended, plain):
            hr.ingest("a", CHUNK_A)
            hr.ingest("b", CHUNK_B)
        cache, _ = blended.prepare_multi(["a", "b"], SUFFIX)
        reused, _ = plain.prepare_multi(["a", "b"], SUFFIX)
        composed = blended.composed_ids(["a", "b"])
    assert composed == CHUNK_A + CHUNK_B
    full = full_prefill(tiny_llama, composed)
    n = len(composed)
    for mine, theirs, before in zip(cache, full, reused, strict=True):
        assert mine.offset == n
        assert max_diff(mine.keys[:, :, :n], theirs.keys[:, :, :n]) < 1e-5
        assert max_diff(mine.values[:, :, :n], theirs.values[:, :, :n]) < 1e-5
    # without recompute the moved chunk's deeper layers miss the cross-chunk attention
    assert max_diff(reused[2].values[:, :, len(CHUNK_A):n], full[2].values[:, :, len(CHUNK_A):n]) > 1e-3
    logits = [np.array(tiny_llama(mx.array([SUFFIX]), cache=c)[0, -1]) for c in (cache, full)]
    assert int(np.argmax(logits[0])) == int(np.argmax(logits[1]))


def test_a_partial_ratio_recomputes_that_share_of_the_moved_tokens_only(tiny_llama: Any) -> None:
    with HybridRetrievalCache(tiny_llama) as hr:
        hr.ingest("a", CHUNK_A)
        hr.ingest("b", CHUNK_B)
        cache, _ = hr.prepare_multi(["a", "b"], SUFFIX)
        before, _ = hr.prepare_multi(["a", "b"], SUFFIX)
    start, total = len(CHUNK_A), len(CHUNK_A) + len(CHUNK_B)
    selected = mlx_blend.blend_recompute(tiny_llama, cache, CHUNK_A + CHUNK_B, start, ratio=0.25, check_layer=1)
    assert len(selected) == round(0.25 * len(CHUNK_B)) == 3
    assert selected == sorted(selected) and all(start <= p < total for p in selected)
    untouched = [p for p in range(total) if p not in selected]
    deep = 2  # past check_layer: only the selected tokens were carried this far
    assert max_diff(cache[deep].keys[:, :, mx.array(untouched)], before[deep].keys[:, :, mx.array(untouched)]) == 0.0
    assert max_diff(cache[deep].keys[:, :, mx.array(selected)], before[deep].keys[:, :, mx.array(selected)]) > 0.0
    assert max_diff(cache[0].keys[:, :, :start], before[0].keys[:, :, :start]) == 0.0  # the exact part stays


def test_recompute_refuses_a_non_llama_layout_and_a_cache_of_another_length(tiny_llama: Any) -> None:
    args = gemma3_text.ModelArgs(model_type="gemma3_text", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                                 num_attention_heads=2, head_dim=32, num_key_value_heads=1, vocab_size=128)
    with pytest.raises(mlx_blend.UnsupportedModel, match="layer 0 of Model has self_attn.q_norm, self_attn.k_norm"):
        HybridRetrievalCache(gemma3_text.Model(args), recompute_ratio=0.2)
    cache = full_prefill(tiny_llama, CHUNK_A)
    with pytest.raises(ValueError, match="the cache holds \\[10\\] tokens, token_ids 22"):
        mlx_blend.blend_recompute(tiny_llama, cache, CHUNK_A + CHUNK_B, 10, ratio=0.5)
    assert mlx_blend.blend_recompute(tiny_llama, cache, CHUNK_A, 10, ratio=0.5) == []
