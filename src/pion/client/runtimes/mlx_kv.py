"""Moving K/V between mlx-lm cache objects and Pion's row layout.

mlx-lm keeps each layer's K and V (after RoPE, like transformers) as ``[batch=1, n_kv_heads,
capacity, head_dim]`` with the first ``offset`` positions valid; pion-server stores rows
``[n_tokens, n_kv_heads * head_dim]``. So a prefix stored by either runtime is restorable by the
other when the namespaces agree (``mlx_runtime.mlx_fingerprint``).

Formats, by the cache object a hit restores into:

* ``fp16`` / ``fp32`` → ``KVCache`` (rows cast to the model dtype).
* ``mlx4g32`` → ``QuantizedKVCache(group_size=32, bits=4)`` with no re-quantization: a stored
  row is ``[packed u32 x kv_dim/8][scales fp16 x kv_dim/32][biases fp16 x kv_dim/32]``
  (docs/formats.md), which is exactly the cache's ``(packed, scales, biases)`` triple at one
  token with the heads side by side (a group of 32 never spans two heads: head_dim % 32 == 0).
  A ``QuantizedKVCache`` of that geometry is stored the same way (``V.STOREBATCH … DTYPE raw``),
  so its bytes round-trip unchanged; the scales are in the activation dtype, so this is
  byte-exact for an fp16 model (an fp32 model's scales are rounded to fp16 once, on store).
* every other codec (int8, fp8, turbo*) → decoded with ``pion.codecs`` into a ``KVCache``.

Sliding-window layers (``RotatingKVCache``, e.g. Gemma 3's local layers, Ministral): a rotating
cache of ``max_size`` keeps every token only while ``offset <= max_size``; past that it overwrites
the oldest ones (after the first ``keep``), so rows ``[0, N)`` no longer exist. A prefix is
therefore cached for such a model only when it fits the smallest window (``prefix_window``): it is
stored as ordinary rows and restored into ``RotatingKVCache(max_size, keep)`` in the exact state a
prefill of those N tokens leaves (``offset == _idx == N``, temporal order). A longer prefix is
refused (``WindowTooSmall``; ``PionPromptCache`` then prefills locally and stores nothing). A
rotating layer holds floats in every format (mlx-lm cannot quantize it), so under mlx4g32 it is
stored encoded by the server and restored dequantized.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from pion.client.kv_shape import KvShape
from pion.codecs import get_codec
from pion.codecs.base import GROUP_SIZE
from pion.codecs.mlx4g32 import pack_mlx_triplet

MLX4_FORMAT = "mlx4g32"
MLX4_BITS = 4
_FLOAT_NP = {"fp16": np.float16, "fp32": np.float32}


class WindowTooSmall(ValueError):
    """A prefix longer than a sliding-window layer's window (its first rows are gone)."""


@dataclass(frozen=True)
class Window:
    """One ``RotatingKVCache`` layer's geometry: ``max_size`` tokens, the first ``keep`` never evicted."""

    max_size: int
    keep: int


def layer_windows(model: Any) -> list[Window | None]:
    """Per layer, the window of a ``RotatingKVCache`` layer, None for a full-history layer.

    Read from the cache list mlx-lm would build for the model (``make_prompt_cache``: the
    model's ``make_cache`` when it has one), so it follows whatever layer pattern the model uses.
    """
    from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache

    return [Window(int(c.max_size), int(c.keep)) if isinstance(c, RotatingKVCache) else None
            for c in make_prompt_cache(model)]


def prefix_window(windows: Sequence[Window | None]) -> int | None:
    """The longest prefix that can be cached: the smallest window, None when no layer slides."""
    sizes = [w.max_size for w in windows if w is not None]
    return min(sizes) if sizes else None


def check_fits(windows: Sequence[Window | None], n_tokens: int) -> None:
    """Raise ``WindowTooSmall`` when ``n_tokens`` exceed the smallest sliding window."""
    limit = prefix_window(windows)
    if limit is not None and n_tokens > limit:
        raise WindowTooSmall(f"prefix of {n_tokens} tokens does not fit the model's sliding window of {limit} "
                             "tokens; only prefixes that fit the window are cached")


def has_rotated(cache: Sequence[Any]) -> bool:
    """True when some ``RotatingKVCache`` layer has held more than its window (its oldest rows are gone)."""
    from mlx_lm.models.cache import RotatingKVCache

    return any(isinstance(c, RotatingKVCache) and c.offset > c.max_size for c in cache)


def kv_shape(model: Any) -> KvShape:
    """The K/V geometry of an mlx-lm model, from its ``args``."""
    args = model.args
    n_heads = int(args.num_attention_heads)
    head_dim = getattr(args, "head_dim", None) or int(args.hidden_size) // n_heads
    n_kv_heads = getattr(args, "num_key_value_heads", None) or n_heads
    return KvShape(len(model.layers), int(n_kv_heads), int(head_dim))


def wire_np_dtype(dtype: Any) -> Any:
    """The numpy dtype of a ``RowSource``'s wire dtype argument (numpy's or torch's float16/float32)."""
    name = str(np.dtype(dtype)) if isinstance(dtype, (type, np.dtype)) else str(dtype)  # torch: "torch.float32"
    if name.endswith("float32"):
        return np.float32
    if name.endswith("float16"):
        return np.float16
    raise ValueError(f"rows travel as float16 or float32, not {name}")


def is_mlx4_cache(layer: Any) -> bool:
    """A ``QuantizedKVCache`` in mlx4g32's geometry (group 32, 4 bits)."""
    from mlx_lm.models.cache import QuantizedKVCache

    return isinstance(layer, QuantizedKVCache) and layer.group_size == GROUP_SIZE and layer.bits == MLX4_BITS


def _token_major(x: mx.array, n_tokens: int) -> mx.array:
    """``[1, H, >=N, X]`` → ``[N, H*X]`` (one row per token, heads side by side)."""
    batch, heads, tokens, width = x.shape
    if batch != 1 or tokens < n_tokens:
        raise ValueError(f"cache holds {tokens} tokens x batch {batch}; need batch 1 and {n_tokens} tokens")
    return x[0, :, :n_tokens, :].transpose(1, 0, 2).reshape(n_tokens, heads * width)


def float_rows(layer: Any, side: str, n_tokens: int, np_dtype: Any) -> np.ndarray:
    """One layer-side as contiguous float ``[n_tokens, kv_dim]`` rows (a quantized cache is dequantized)."""
    from mlx_lm.models.cache import QuantizedKVCache, RotatingKVCache

    if isinstance(layer, RotatingKVCache) and (n_tokens > layer.max_size or layer.offset > layer.max_size):
        raise WindowTooSmall(f"a sliding-window layer of {layer.max_size} tokens holding {layer.offset} has "
                             f"rotated: its first {n_tokens} rows are not all there")
    states = layer.keys if side == "k" else layer.values
    if isinstance(layer, QuantizedKVCache):
        packed, scales, biases = states
        states = mx.dequantize(packed, scales, biases, group_size=layer.group_size, bits=layer.bits)
    rows = _token_major(states, n_tokens).astype(mx.float16 if np_dtype == np.float16 else mx.float32)
    return np.ascontiguousarray(np.array(rows, copy=False))


def mlx4_rows(layer: Any, side: str, n_tokens: int) -> np.ndarray:
    """One layer-side of a group-32 4-bit ``QuantizedKVCache`` as encoded mlx4g32 rows (uint8)."""
    packed, scales, biases = layer.keys if side == "k" else layer.values
    words = np.array(_token_major(packed, n_tokens), copy=False)
    sc = np.array(_token_major(scales, n_tokens).astype(mx.float16), copy=False)
    bi = np.array(_token_major(biases, n_tokens).astype(mx.float16), copy=False)
    return np.frombuffer(pack_mlx_triplet(words, sc, bi), dtype=np.uint8).reshape(n_tokens, -1)


def _head_major(rows: mx.array, shape: KvShape, n_tokens: int, width: int) -> mx.array:
    """``[N, H*X]`` → ``[1, H, N, X]``, contiguous (what mlx-lm's caches slice-assign into)."""
    return mx.contiguous(rows.reshape(1, n_tokens, shape.n_kv_heads, width).transpose(0, 2, 1, 3))


def float_layer(data: bytes | memoryview, fmt: str, shape: KvShape, n_tokens: int, dtype: Any) -> mx.array:
    """A restored layer-side ``[1, H, N, D]`` in ``dtype`` from raw reply bytes of format ``fmt``."""
    if fmt in _FLOAT_NP:
        rows = np.frombuffer(data, dtype=_FLOAT_NP[fmt])
    else:
        rows = get_codec(fmt).decode(data, shape.kv_dim, np.float32)
    if rows.size != n_tokens * shape.kv_dim:
        raise ValueError(f"got {rows.size} values, expected {n_tokens} x {shape.kv_dim}")
    return _head_major(mx.array(rows.reshape(n_tokens, shape.kv_dim)), shape, n_tokens, shape.head_dim).astype(dtype)


def mlx4_layer(data: bytes | memoryview, shape: KvShape, n_tokens: int,
               dtype: Any) -> tuple[mx.array, mx.array, mx.array]:
    """A restored ``(packed, scales, biases)`` triple ``[1, H, N, ·]`` from raw mlx4g32 rows."""
    kv_dim = shape.kv_dim
    row_bytes = get_codec(MLX4_FORMAT).row_bytes(kv_dim)
    if len(data) != n_tokens * row_bytes:
        raise ValueError(f"got {len(data)} bytes, expected {n_tokens} rows of {row_bytes}")
    raw = np.frombuffer(data, dtype=np.uint8).reshape(n_tokens, row_bytes)
    n_words, n_groups = kv_dim // 8, kv_dim // GROUP_SIZE
    packed = np.ascontiguousarray(raw[:, : n_words * 4]).view("<u4")
    params = np.ascontiguousarray(raw[:, n_words * 4:]).view("<f2")
    d = shape.head_dim
    return (_head_major(mx.array(packed), shape, n_tokens, d // 8),
            _head_major(mx.array(params[:, :n_groups]), shape, n_tokens, d // GROUP_SIZE).astype(dtype),
            _head_major(mx.array(params[:, n_groups:]), shape, n_tokens, d // GROUP_SIZE).astype(dtype))


def build_cache(shape: KvShape, n_tokens: int, k_formats: Sequence[str], v_formats: Sequence[str],
                k_reply: Sequence[bytes], v_reply: Sequence[bytes], dtype: Any,
                windows: Sequence[Window | None] | None = None) -> list[Any]:
    """A new mlx-lm cache list holding a restored prefix (one object per layer; see the module docstring).

    A layer with a window (``windows``, from ``layer_windows``) becomes a ``RotatingKVCache`` in
    the state a prefill of ``n_tokens`` leaves; otherwise a layer whose K and V are both mlx4g32
    becomes a ``QuantizedKVCache`` and any other a ``KVCache``. Raises ValueError for a reply of
    the wrong shape, ``WindowTooSmall`` for a prefix longer than a window.
    """
    from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache

    windows = list(windows) if windows is not None else [None] * shape.n_layers
    if len(windows) != shape.n_layers:
        raise ValueError(f"{len(windows)} layer windows for {shape.n_layers} layers")
    check_fits(windows, n_tokens)
    for side, reply in (("k", k_reply), ("v", v_reply)):
        if len(reply) != shape.n_layers:
            raise ValueError(f"V.MFETCH returned {len(reply)} layers for side {side}, expected {shape.n_layers}")
    cache: list[Any] = []
    for layer in range(shape.n_layers):
        kf, vf = k_formats[layer], v_formats[layer]
        obj: Any
        window = windows[layer]
        if window is not None:
            obj = RotatingKVCache(max_size=window.max_size, keep=window.keep)
            obj.keys = float_layer(k_reply[layer], kf, shape, n_tokens, dtype)
            obj.values = float_layer(v_reply[layer], vf, shape, n_tokens, dtype)
            obj._idx = n_tokens  # what RotatingKVCache's own first update leaves (temporal order, no gap)
        elif kf == MLX4_FORMAT and vf == MLX4_FORMAT:
            obj = QuantizedKVCache(group_size=GROUP_SIZE, bits=MLX4_BITS)
            obj.keys = mlx4_layer(k_reply[layer], shape, n_tokens, dtype)
            obj.values = mlx4_layer(v_reply[layer], shape, n_tokens, dtype)
        else:
            obj = KVCache()
            obj.keys = float_layer(k_reply[layer], kf, shape, n_tokens, dtype)
            obj.values = float_layer(v_reply[layer], vf, shape, n_tokens, dtype)
        obj.offset = n_tokens
        cache.append(obj)
    mx.eval([c.state for c in cache])
    return cache


def round_params_to_stored(cache: list[Any]) -> None:
    """Round mlx4g32 layers' scales and biases to fp16, as storing them does (a no-op for fp16 models).

    Called after a miss's prefill, so the process that prefilled decodes with the same bits as
    every process that restores the prefix, and a miss and a hit generate the same tokens.
    """
    for layer in cache:
        if is_mlx4_cache(layer) and layer.keys is not None and layer.keys[1].dtype != mx.float16:
            layer.keys, layer.values = (
                (packed, scales.astype(mx.float16).astype(scales.dtype), biases.astype(mx.float16).astype(biases.dtype))
                for packed, scales, biases in (layer.keys, layer.values))
    mx.eval([c.state for c in cache])


def make_cache(model: Any, formats: Sequence[str]) -> list[Any]:
    """An empty cache list for a prefill whose layers will be stored in ``formats`` (per layer).

    mlx4g32 layers prefill into ``QuantizedKVCache(32, 4)``, so a miss computes exactly what a hit
    restores; every other layer into what mlx-lm would use (``KVCache``, or a sliding-window
    layer's ``RotatingKVCache``, which stays float in every format).
    """
    from mlx_lm.models.cache import QuantizedKVCache, RotatingKVCache, make_prompt_cache

    native = make_prompt_cache(model)
    return [QuantizedKVCache(group_size=GROUP_SIZE, bits=MLX4_BITS)
            if f == MLX4_FORMAT and not isinstance(c, RotatingKVCache) else c
            for f, c in zip(formats, native, strict=True)]
