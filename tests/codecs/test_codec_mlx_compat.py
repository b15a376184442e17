"""mlx4g32 is byte-compatible with MLX's 4-bit group-32 affine quantization.

Runs where ``mlx.core`` imports (Linux CPU: ``pip install 'mlx[cpu]'``, in the dev
extra); skipped otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

from pion.codecs import get_codec
from pion.codecs.mlx4g32 import pack_mlx_triplet

# ImportError, not just ModuleNotFoundError: plain `mlx` on Linux fails loading libmlx.so
mx = pytest.importorskip("mlx.core", exc_type=ImportError,
                         reason="mlx is not importable here (pip install 'mlx[cpu]' on Linux)")

KV_DIM = 192


def mlx_quantized(seed: int) -> tuple[np.ndarray, object, object, object]:
    rows = (np.random.default_rng(seed).standard_normal((64, KV_DIM)) * 2.5).astype(np.float16)
    packed, scales, biases = mx.quantize(mx.array(rows), group_size=32, bits=4)
    return rows, packed, scales, biases


def test_our_decoder_reads_what_mx_quantize_writes_as_mx_dequantize_does() -> None:
    _, packed, scales, biases = mlx_quantized(0)
    blob = pack_mlx_triplet(np.array(packed), np.array(scales), np.array(biases))
    ours = get_codec("mlx4g32").decode(blob, KV_DIM)
    # fp32 scales/biases make MLX dequantize in fp32 too, the way our decoder does
    theirs = np.array(mx.dequantize(packed, scales.astype(mx.float32), biases.astype(mx.float32),
                                    group_size=32, bits=4))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)


def test_the_packed_words_are_mx_quantize_output_byte_for_byte() -> None:
    _, packed, scales, biases = mlx_quantized(1)
    blob = pack_mlx_triplet(np.array(packed), np.array(scales), np.array(biases))
    row_bytes = get_codec("mlx4g32").row_bytes(KV_DIM)
    raw = np.frombuffer(blob, dtype=np.uint8).reshape(-1, row_bytes)
    assert raw[:, : KV_DIM // 2].tobytes() == np.array(packed).astype("<u4").tobytes()
    assert raw[:, KV_DIM // 2:].view("<f2")[:, : KV_DIM // 32].tolist() == np.array(scales).tolist()


def test_mx_dequantize_reads_what_our_encoder_writes() -> None:
    rows = (np.random.default_rng(2).standard_normal((64, KV_DIM)) * 2.5).astype(np.float32)
    codec = get_codec("mlx4g32")
    raw = np.frombuffer(codec.encode(rows), dtype=np.uint8).reshape(-1, codec.row_bytes(KV_DIM))
    packed = mx.array(np.ascontiguousarray(raw[:, : KV_DIM // 2]).view("<u4"))
    params = raw[:, KV_DIM // 2:].view("<f2").astype(np.float32)
    scales, biases = mx.array(params[:, : KV_DIM // 32]), mx.array(params[:, KV_DIM // 32:])
    theirs = np.array(mx.dequantize(packed, scales, biases, group_size=32, bits=4))
    np.testing.assert_allclose(codec.decode(raw.tobytes(), KV_DIM), theirs, rtol=0, atol=1e-6)
