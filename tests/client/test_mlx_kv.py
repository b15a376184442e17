"""mlx-lm cache objects <-> pion-server rows, with no model: every format round-trips, and mlx4g32
keeps a ``QuantizedKVCache``'s bytes (``mx.quantize``'s output) unchanged through the server.

Runs where mlx-lm imports (Linux: ``mlx[cpu]`` + ``mlx-lm``, the dev extra); skipped otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
cache_mod = pytest.importorskip("mlx_lm.models.cache", reason="mlx-lm is not installed")

from pion import PionClient  # noqa: E402
from pion.client.prefix_transport import LayerFormats, PrefixTransport  # noqa: E402
from pion.client.runtimes import mlx_kv  # noqa: E402
from pion.client.runtimes.transformers_kv import KvShape  # noqa: E402
from pion.codecs import get_codec  # noqa: E402
from pion.common.ids import k_session  # noqa: E402
from support.procs import ServerProcess  # noqa: E402

SHAPE = KvShape(n_layers=2, n_kv_heads=3, head_dim=64)  # SmolLM2's heads, two layers
N_TOKENS = 37  # not a multiple of mlx-lm's 256-token step: the restore must cut the padding
FORMATS = ["fp16", "fp32", "int8", "fp8", "mlx4g32", "turbo2", "turbo3", "turbo4"]


def random_kv(seed: int, dtype: Any = None) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    k, v = (rng.standard_normal((1, SHAPE.n_kv_heads, N_TOKENS, SHAPE.head_dim)).astype(np.float32) * 2
            for _ in range(2))
    return mx.array(k).astype(dtype or mx.float32), mx.array(v).astype(dtype or mx.float32)


def float_cache(seed: int) -> list[Any]:
    cache = []
    for layer in range(SHAPE.n_layers):
        c = cache_mod.KVCache()
        c.update_and_fetch(*random_kv(seed + layer))
        cache.append(c)
    return cache


def quantized_cache(seed: int, dtype: Any) -> list[Any]:
    """A QuantizedKVCache(32, 4) per layer, filled the way mlx-lm fills it (``mx.quantize`` inside)."""
    cache = []
    for layer in range(SHAPE.n_layers):
        c = cache_mod.QuantizedKVCache(group_size=32, bits=4)
        c.update_and_fetch(*random_kv(seed + layer, dtype))
        cache.append(c)
    mx.eval([c.state[:2] for c in cache])
    return cache


def store_and_restore(server: ServerProcess, ns: str, fmt: str, cache: list[Any], dtype: Any) -> list[Any]:
    client = PionClient(port=server.port)
    transport = PrefixTransport(client, SHAPE, LayerFormats.uniform(fmt, SHAPE.n_layers))

    def rows(side: Any, layer: int, wire: Any) -> np.ndarray:
        return mlx_kv.float_rows(cache[layer], side, N_TOKENS, np.float16 if "16" in str(wire) else np.float32)

    def encoded(side: Any, layer: int) -> np.ndarray | None:
        ok = fmt == "mlx4g32" and mlx_kv.is_mlx4_cache(cache[layer])
        return mlx_kv.mlx4_rows(cache[layer], side, N_TOKENS) if ok else None

    outcome = transport.store(ns, rows, encoded=encoded)
    assert (outcome.errors, outcome.deferred) == ([], False)
    k_reply, v_reply = transport.fetch(ns, N_TOKENS)
    formats = [fmt] * SHAPE.n_layers
    restored = mlx_kv.build_cache(SHAPE, N_TOKENS, formats, formats, k_reply, v_reply, dtype)
    client.close()
    return restored


def expected_after_codec(fmt: str, states: Any) -> np.ndarray:
    """What the server's codec makes of fp16 wire rows (fp32 rows for fp32), as ``[1, H, N, D]``."""
    wire = np.float32 if fmt == "fp32" else np.float16
    rows = np.array(states[0, :, :N_TOKENS, :].transpose(1, 0, 2).reshape(N_TOKENS, SHAPE.kv_dim).astype(
        mx.float32)).astype(wire).astype(np.float32)
    codec = get_codec(fmt)
    decoded = codec.decode(codec.encode(rows), SHAPE.kv_dim, np.float32)
    return decoded.reshape(1, N_TOKENS, SHAPE.n_kv_heads, SHAPE.head_dim).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_kv_cache_restored_in_each_format_holds_what_the_codec_decodes(
        shared_pion_server: ServerProcess, fmt: str) -> None:
    cache = float_cache(seed=10)
    restored = store_and_restore(shared_pion_server, f"mlxkv-{fmt}", fmt, cache, mx.float32)
    want_type = "QuantizedKVCache" if fmt == "mlx4g32" else "KVCache"
    assert [type(c).__name__ for c in restored] == [want_type] * SHAPE.n_layers
    assert [c.offset for c in restored] == [N_TOKENS] * SHAPE.n_layers
    for original, back in zip(cache, restored, strict=True):
        for side in ("keys", "values"):
            got = getattr(back, side)
            if fmt == "mlx4g32":
                packed, scales, biases = got
                got = mx.dequantize(packed, scales, biases, group_size=32, bits=4)
            expected = expected_after_codec(fmt, getattr(original, side))
            assert np.array_equal(np.array(got), expected) is True


def test_an_fp16_quantized_kv_cache_comes_back_bit_for_bit_as_mx_quantize_wrote_it(
        shared_pion_server: ServerProcess) -> None:
    cache = quantized_cache(seed=20, dtype=mx.float16)
    restored = store_and_restore(shared_pion_server, "mlxkv-q16", "mlx4g32", cache, mx.float16)
    for original, back in zip(cache, restored, strict=True):
        assert type(back).__name__ == "QuantizedKVCache"
        assert (back.group_size, back.bits, back.offset) == (32, 4, N_TOKENS)
        for side in ("keys", "values"):
            for mine, theirs in zip(getattr(back, side), getattr(original, side), strict=True):
                want = np.array(theirs[:, :, :N_TOKENS, :])
                assert mine.dtype == theirs.dtype
                assert np.array(mine).tobytes() == want.tobytes()


def test_the_stored_mlx4g32_rows_are_mx_quantize_output_byte_for_byte(shared_pion_server: ServerProcess) -> None:
    k, v = random_kv(seed=30, dtype=mx.float16)
    cache = cache_mod.QuantizedKVCache(group_size=32, bits=4)
    cache.update_and_fetch(k, v)
    store_and_restore(shared_pion_server, "mlxkv-bytes", "mlx4g32", [cache, cache], mx.float16)
    stored = PionClient(port=shared_pion_server.port).v_fetch(k_session("mlxkv-bytes"), 0, 0, N_TOKENS, dtype="raw")
    packed, scales, biases = mx.quantize(k, group_size=32, bits=4)  # what QuantizedKVCache ran
    rows = [np.array(a[0].transpose(1, 0, 2).reshape(N_TOKENS, -1)) for a in (packed, scales, biases)]
    expected = np.concatenate([rows[0].view(np.uint8), rows[1].view(np.uint8), rows[2].view(np.uint8)], axis=1)
    assert bytes(stored) == expected.tobytes()


def test_an_fp32_quantized_cache_stores_its_scales_rounded_to_fp16_once() -> None:
    cache = quantized_cache(seed=40, dtype=mx.float32)
    before = [np.array(c.keys[1][:, :, :N_TOKENS]) for c in cache]
    mlx_kv.round_params_to_stored(cache)
    after = [np.array(c.keys[1][:, :, :N_TOKENS]) for c in cache]
    assert [a.dtype for a in after] == [np.float32] * SHAPE.n_layers
    assert all(np.array_equal(a, b.astype(np.float16).astype(np.float32)) for a, b in zip(after, before)) is True


def test_a_reply_with_the_wrong_number_of_layers_is_refused() -> None:
    with pytest.raises(ValueError, match="V.MFETCH returned 1 layers for side k, expected 2"):
        mlx_kv.build_cache(SHAPE, N_TOKENS, ["fp16"] * 2, ["fp16"] * 2, [b""], [b"", b""], mx.float32)


def test_a_layer_of_the_wrong_length_is_refused() -> None:
    short = b"\x00" * (SHAPE.kv_dim * 2 * (N_TOKENS - 1))
    with pytest.raises(ValueError, match=f"expected {N_TOKENS} x {SHAPE.kv_dim}"):
        mlx_kv.build_cache(SHAPE, N_TOKENS, ["fp16"] * 2, ["fp16"] * 2, [short] * 2, [short] * 2, mx.float32)


@pytest.mark.metal
@pytest.mark.skipif(not mx.metal.is_available(), reason="needs MLX's Metal backend (Apple silicon)")
def test_a_restored_cache_is_built_on_the_metal_device_with_the_same_values(shared_pion_server: ServerProcess) -> None:
    assert mx.default_device() == mx.gpu
    cache = float_cache(seed=50)
    restored = store_and_restore(shared_pion_server, "mlxkv-metal", "fp32", cache, mx.float32)
    for original, back in zip(cache, restored, strict=True):
        assert np.array_equal(np.array(back.keys), np.array(original.keys[:, :, :N_TOKENS, :])) is True
