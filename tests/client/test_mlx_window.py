"""Sliding-window models on the MLX runtime: a prefix that fits the window round-trips through
pion-server into ``RotatingKVCache`` layers that continue exactly like the miss that stored it,
also past the window; a longer prefix (or a rotated cache) is refused with nothing stored.

A tiny randomly initialised Gemma 3 text model (mlx-lm's own class: a sliding layer, then a
global one) built in the test, so no weights are needed and it runs in about a second.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
cache_mod = pytest.importorskip("mlx_lm.models.cache", reason="mlx-lm is not installed")

from mlx_lm.models import gemma3_text  # noqa: E402

from pion import PionClient  # noqa: E402
from pion.client.runtimes import mlx_kv  # noqa: E402
from pion.client.runtimes.transformers_kv import KvShape  # noqa: E402
from pion.mlx import PionPromptCache  # noqa: E402
from support.procs import ServerProcess  # noqa: E402

WINDOW = 16
PREFIX = [5, 17, 3, 99, 42, 7, 64, 11, 23, 8, 1, 77]  # 12 tokens: fits the window
SUFFIX = [9, 14, 33, 2, 61, 18, 40, 4, 90, 27]  # prefix + suffix = 22 tokens: past the window


@pytest.fixture(scope="module")
def tiny_gemma() -> Any:
    args = gemma3_text.ModelArgs(model_type="gemma3_text", hidden_size=64, num_hidden_layers=2,
                                 intermediate_size=128, num_attention_heads=2, head_dim=32, num_key_value_heads=1,
                                 vocab_size=128, sliding_window=WINDOW, sliding_window_pattern=2)
    mx.random.seed(3)
    model = gemma3_text.Model(args)
    mx.eval(model.parameters())
    return model


def continue_greedy(model: Any, cache: list[Any], suffix: list[int], steps: int) -> tuple[np.ndarray, list[int]]:
    """The suffix's logits in one forward, then ``steps`` greedy tokens one at a time (in-place rotation)."""
    logits = model(mx.array([suffix]), cache=cache)[0]
    out = [int(mx.argmax(logits[-1]).item())]
    for _ in range(steps - 1):
        out.append(int(mx.argmax(model(mx.array([[out[-1]]]), cache=cache)[0, -1]).item()))
    return np.array(logits), out


def test_the_window_is_read_from_the_models_own_cache_layout(tiny_gemma: Any) -> None:
    windows = mlx_kv.layer_windows(tiny_gemma)
    assert windows == [mlx_kv.Window(max_size=WINDOW, keep=0), None]
    assert mlx_kv.prefix_window(windows) == WINDOW
    assert mlx_kv.prefix_window([None, None]) is None


@pytest.mark.parametrize("fmt", ["fp32", "fp16"])
def test_a_prefix_that_fits_the_window_restores_into_a_rotating_cache_that_continues_like_the_miss(
        tiny_gemma: Any, shared_pion_server: ServerProcess, fmt: str) -> None:
    with PionPromptCache(tiny_gemma, vquant=fmt, port=shared_pion_server.port) as writer:
        miss = writer.get_or_prefill(PREFIX)
        assert writer.stats()["misses"] == 1
    with PionPromptCache(tiny_gemma, vquant=fmt, port=shared_pion_server.port) as reader:
        hit = reader.get_or_prefill(PREFIX)
        assert (reader.stats()["hits"], reader.stats()["window_refusals"]) == (1, 0)
    assert [type(c).__name__ for c in hit] == ["RotatingKVCache", "KVCache"]
    assert (hit[0].max_size, hit[0].keep, hit[0].offset, hit[0]._idx) == (WINDOW, 0, len(PREFIX), len(PREFIX))
    if fmt == "fp32":  # fp32 rows are exact: the restored window holds the miss's keys bit for bit
        assert np.array(hit[0].keys).tobytes() == np.array(miss[0].keys[..., :len(PREFIX), :]).tobytes()
    miss_logits, miss_tokens = continue_greedy(tiny_gemma, miss, SUFFIX, steps=8)
    hit_logits, hit_tokens = continue_greedy(tiny_gemma, hit, SUFFIX, steps=8)
    assert hit[0].offset == miss[0].offset == len(PREFIX) + len(SUFFIX) + 7
    if fmt == "fp32":
        assert np.array_equal(hit_logits, miss_logits) is True
    assert hit_tokens == miss_tokens


def test_mlx4g32_keeps_the_sliding_layer_float_and_the_global_layer_quantized(
        tiny_gemma: Any, shared_pion_server: ServerProcess) -> None:
    with PionPromptCache(tiny_gemma, vquant="mlx4g32", port=shared_pion_server.port) as pc:
        miss = pc.get_or_prefill(PREFIX)
        hit = pc.get_or_prefill(PREFIX)
        assert (pc.stats()["misses"], pc.stats()["hits"]) == (1, 1)
    assert [type(c).__name__ for c in miss] == ["RotatingKVCache", "QuantizedKVCache"]
    assert [type(c).__name__ for c in hit] == ["RotatingKVCache", "QuantizedKVCache"]
    for side in ("keys", "values"):  # the global layer: QuantizedKVCache bytes unchanged through the server
        for mine, theirs in zip(getattr(hit[1], side), getattr(miss[1], side), strict=True):
            assert np.array(mine).tobytes() == np.array(theirs[..., :len(PREFIX), :]).tobytes()
    assert hit[0].keys.shape == (1, 1, len(PREFIX), 32)


def test_a_prefix_longer_than_the_window_is_prefilled_locally_and_never_stored(
        tiny_gemma: Any, shared_pion_server: ServerProcess) -> None:
    long_prefix = PREFIX + SUFFIX  # 22 tokens > 16
    with PionPromptCache(tiny_gemma, vquant="fp16", port=shared_pion_server.port) as pc:
        first = pc.get_or_prefill(long_prefix)
        pc.get_or_prefill(long_prefix)
        stats = pc.stats()
        assert (stats["hits"], stats["misses"], stats["window_refusals"], stats["bytes_stored"]) == (0, 2, 2, 0)
        assert pc.lookup(pc.namespace_for(long_prefix)) is False
        assert pc.store(long_prefix, first) is False
        assert pc.stats()["window_refusals"] == 3
    assert first[0].offset == len(long_prefix)


def test_storing_a_short_prefix_from_a_cache_that_has_rotated_is_refused(
        tiny_gemma: Any, shared_pion_server: ServerProcess) -> None:
    cache = cache_mod.make_prompt_cache(tiny_gemma)
    tiny_gemma(mx.array([PREFIX + SUFFIX]), cache=cache)
    with PionPromptCache(tiny_gemma, vquant="fp16", port=shared_pion_server.port) as pc:
        assert pc.store(PREFIX, cache) is False
        assert pc.stats()["window_refusals"] == 1
        assert pc.lookup(pc.namespace_for(PREFIX + [0])) is False
    assert mlx_kv.has_rotated(cache) is True


def test_rows_past_a_rotated_window_and_a_restore_longer_than_the_window_are_refused(
        shared_pion_server: ServerProcess) -> None:
    layer = cache_mod.RotatingKVCache(max_size=4)
    kv = mx.zeros((1, 1, 6, 32))
    layer.update_and_fetch(kv, kv)
    layer.update_and_fetch(kv[:, :, :1], kv[:, :, :1])  # 7 tokens through a window of 4: rotated
    with pytest.raises(mlx_kv.WindowTooSmall, match="has rotated"):
        mlx_kv.float_rows(layer, "k", 3, np.float16)
    shape = KvShape(n_layers=1, n_kv_heads=1, head_dim=32)
    rows = np.zeros((6, 32), np.float16).tobytes()
    with pytest.raises(mlx_kv.WindowTooSmall, match="does not fit the model's sliding window of 4 tokens"):
        mlx_kv.build_cache(shape, 6, ["fp16"], ["fp16"], [rows], [rows], mx.float16, [mlx_kv.Window(4, 0)])


def test_stage2_is_refused_for_a_sliding_window_model(tiny_gemma: Any, shared_pion_server: ServerProcess) -> None:
    client = PionClient(port=shared_pion_server.port)
    with pytest.raises(ValueError, match="stage2 is not supported for sliding-window models"):
        PionPromptCache(tiny_gemma, client=client, stage2=True)
    assert client.ping() is True
    client.close()


def test_a_row_sources_wire_dtype_is_read_from_numpys_or_torchs_spelling() -> None:
    assert [mlx_kv.wire_np_dtype(d) for d in (np.float32, np.float16, np.dtype("float32"), "torch.float16")] == [
        np.float32, np.float16, np.float32, np.float16]
    with pytest.raises(ValueError, match="rows travel as float16 or float32, not int8"):
        mlx_kv.wire_np_dtype(np.int8)
