"""Recurrent and hybrid mlx-lm models through PionPromptCache: ``ArraysCache`` states travel through
``SSM.PREFIX.*`` and attention layers through the K/V prefix, and a hit continues exactly like the
miss that stored it.

Tiny randomly initialised mlx-lm models built in the test (no weights): LFM2 (short-conv,
attention, short-conv: a hybrid) and Mamba2 (recurrent only). About half a minute here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
cache_mod = pytest.importorskip("mlx_lm.models.cache", reason="mlx-lm is not installed")

from mlx_lm.models import lfm2, mamba2  # noqa: E402

from pion import PionClient  # noqa: E402
from pion.client.runtimes import mlx_hybrid  # noqa: E402
from pion.client.state_blob import StateBlobError  # noqa: E402
from pion.mlx import PionPromptCache  # noqa: E402
from support.procs import ServerProcess  # noqa: E402

PREFIX = [5, 17, 3, 99, 42, 7, 64, 11, 23]
SUFFIX = [9, 14, 33, 2]


@pytest.fixture(scope="module")
def tiny_lfm2() -> Any:
    args = lfm2.ModelArgs(model_type="lfm2", vocab_size=128, hidden_size=64, num_hidden_layers=3,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, norm_eps=1e-5,
                          conv_bias=False, conv_L_cache=3, block_dim=64, block_multiple_of=16,
                          block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=False, intermediate_size=128,
                          layer_types=["conv", "full_attention", "conv"])
    mx.random.seed(5)
    model = lfm2.Model(args)
    mx.eval(model.parameters())
    return model


@pytest.fixture(scope="module")
def tiny_mamba2() -> Any:
    args = mamba2.ModelArgs(model_type="mamba2", num_heads=4, head_dim=16, vocab_size=128, hidden_size=32,
                            intermediate_size=64, state_size=16, num_hidden_layers=2, layer_norm_epsilon=1e-5,
                            conv_kernel=4, n_groups=1, use_bias=False, use_conv_bias=True, tie_word_embeddings=True,
                            time_step_limit=(0.0, float("inf")), time_step_rank="auto")
    mx.random.seed(6)
    model = mamba2.Model(args)
    mx.eval(model.parameters())
    return model


def continue_greedy(model: Any, cache: list[Any], steps: int) -> tuple[np.ndarray, list[int]]:
    """The suffix's logits in one forward, then ``steps`` greedy tokens one at a time."""
    logits = model(mx.array([SUFFIX]), cache=cache)[0]
    out = [int(mx.argmax(logits[-1]).item())]
    for _ in range(steps - 1):
        out.append(int(mx.argmax(model(mx.array([[out[-1]]]), cache=cache)[0, -1]).item()))
    return np.array(logits), out


def state_bytes(layer: Any) -> list[bytes | None]:
    return [None if a is None else np.array(a).tobytes() for a in layer.cache]


def test_the_layout_names_the_recurrent_layers_and_the_mlx_state_layout(tiny_lfm2: Any, tiny_mamba2: Any) -> None:
    lfm = mlx_hybrid.hybrid_transport_for(tiny_lfm2)
    mamba = mlx_hybrid.hybrid_transport_for(tiny_mamba2)
    assert lfm is not None and mamba is not None
    assert (lfm.layout, lfm.attention_layers, lfm.recurrent_layers) == ("mlx:RAR", [1], [0, 2])
    assert (lfm.kv_shape.n_layers, lfm.kv_shape.kv_dim) == (1, 32)
    assert (mamba.layout, mamba.kv_shape.n_layers) == ("mlx:RR", 0)


@pytest.mark.parametrize("model_name", ["tiny_lfm2", "tiny_mamba2"])
def test_a_hit_restores_the_states_bit_for_bit_and_continues_exactly_like_the_miss(
        request: pytest.FixtureRequest, shared_pion_server: ServerProcess, model_name: str) -> None:
    model = request.getfixturevalue(model_name)
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port) as writer:
        miss = writer.get_or_prefill(PREFIX)
        assert (writer.stats()["misses"], writer.stats()["store_failures"]) == (1, 0)
        assert writer.stats()["bytes_stored"] > 0
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port) as reader:
        hit = reader.get_or_prefill(PREFIX)
        assert (reader.stats()["hits"], reader.stats()["fallbacks"]) == (1, 0)
    assert [type(c).__name__ for c in hit] == [type(c).__name__ for c in miss]
    for mine, theirs in zip(hit, miss, strict=True):
        if isinstance(theirs, cache_mod.ArraysCache):
            assert state_bytes(mine) == state_bytes(theirs)
        else:
            assert mine.offset == theirs.offset == len(PREFIX)
            assert np.array(mine.keys).tobytes() == np.array(theirs.keys[..., :len(PREFIX), :]).tobytes()
    miss_logits, miss_tokens = continue_greedy(model, miss, steps=6)
    hit_logits, hit_tokens = continue_greedy(model, hit, steps=6)
    assert np.array_equal(hit_logits, miss_logits) is True
    assert hit_tokens == miss_tokens
    # and the restored state is really used: one uninterrupted forward gives the same logits
    # (from a zero state they differ by ~4)
    whole = model(mx.array([PREFIX + SUFFIX]), cache=cache_mod.make_prompt_cache(model))[0, len(PREFIX):]
    assert float(np.abs(np.array(whole) - hit_logits).max()) < 1e-5


def test_mlx4g32_quantizes_the_attention_layer_and_keeps_the_states_exact(
        tiny_lfm2: Any, shared_pion_server: ServerProcess) -> None:
    with PionPromptCache(tiny_lfm2, vquant="mlx4g32", port=shared_pion_server.port) as pc:
        miss = pc.get_or_prefill(PREFIX)
        hit = pc.get_or_prefill(PREFIX)
        assert (pc.stats()["misses"], pc.stats()["hits"]) == (1, 1)
    assert [type(c).__name__ for c in hit] == ["ArraysCache", "QuantizedKVCache", "ArraysCache"]
    assert [type(c).__name__ for c in miss] == ["ArraysCache", "QuantizedKVCache", "ArraysCache"]
    for mine, theirs in zip(hit[1].keys, miss[1].keys, strict=True):
        assert np.array(mine).tobytes() == np.array(theirs[..., :len(PREFIX), :]).tobytes()
    assert state_bytes(hit[0]) == state_bytes(miss[0])


def test_states_of_every_float_dtype_round_trip_and_others_are_refused() -> None:
    arrays = [mx.array([[1.5, -2.25]], dtype=mx.bfloat16), None, mx.array([3.0, 0.5], dtype=mx.float16),
              mx.arange(6, dtype=mx.float32).reshape(2, 3)]
    back = mlx_hybrid.decode_state(mlx_hybrid.encode_state(arrays))
    assert [None if a is None else a.dtype for a in back] == [mx.bfloat16, None, mx.float16, mx.float32]
    for mine, theirs in zip(back, arrays, strict=True):
        if theirs is not None:
            assert mine.shape == theirs.shape
            assert np.array(mine.astype(mx.float32)).tolist() == np.array(theirs.astype(mx.float32)).tolist()
    with pytest.raises(StateBlobError, match="dtype mlx.core.int32 has no state-blob code"):
        mlx_hybrid.encode_state([mx.array([1, 2])])


def test_a_cache_past_the_prefix_is_refused_and_a_missing_state_falls_back_to_a_local_prefill(
        tiny_lfm2: Any, shared_pion_server: ServerProcess) -> None:
    prefix = PREFIX[::-1]
    longer = cache_mod.make_prompt_cache(tiny_lfm2)
    tiny_lfm2(mx.array([prefix + SUFFIX]), cache=longer)
    client = PionClient(port=shared_pion_server.port)
    with PionPromptCache(tiny_lfm2, vquant="fp16", client=client) as pc:
        with pytest.raises(ValueError, match="the cache holds \\[13\\] tokens, the prefix 9"):
            pc.store(prefix, longer)
        assert pc.lookup(pc.namespace_for(prefix)) is False
        pc.get_or_prefill(prefix)
        ns = pc.namespace_for(prefix)
        assert client.ssm_prefix_drop(ns) is True  # the K/V half stays: LOOKUP still answers +HIT
        assert pc.lookup(ns) is True
        again = pc.get_or_prefill(prefix)
        assert (pc.stats()["hits"], pc.stats()["misses"], pc.stats()["fallbacks"]) == (0, 2, 1)
    assert again[1].offset == len(prefix)
    client.close()


def test_stage2_is_refused_for_a_recurrent_model(tiny_mamba2: Any, shared_pion_server: ServerProcess) -> None:
    with pytest.raises(ValueError, match="recurrent/hybrid models"):
        PionPromptCache(tiny_mamba2, port=shared_pion_server.port, stage2=True)
