"""``int{5,6}h{64,128}r``: a per-head V format applied after a Hadamard rotation of each head.

Why: V's per-head scale is set by the head's largest value, and a few channels of a head are
larger than the rest, so most values get a fraction of the levels. An orthonormal Hadamard
rotation of the head (QuaRot, QServe's SmoothAttention does the same job by scaling) spreads those
channels over all 64 values before quantizing, and the inverse rotation spreads the rounding error
back evenly. On issue 20's dev split it cut the mean KL of 6-bit V 5x and of 5-bit V 4x (the sink
row in fp16 does the rest: ``int6h64rs128`` in ``pion.codecs.sink_rows``). Attention needs V itself,
so the decoder rotates back: rotation is invisible outside the codec.

Layout, per row of D values: exactly the base format's row (int5h64 / int6h64 / int5h128 /
int6h128) of the rotated row y, where for each head k (values h*k .. h*k + h - 1, h = 64 or 128)
  y_k = x_k @ W,  W = H_h / sqrt(h),  H_h the Sylvester Hadamard matrix (H_1 = [1],
        H_2n = [[H_n, H_n], [H_n, -H_n]]: entry (i, j) = (-1)^popcount(i & j));
  x_hat_k = y_hat_k @ W   (W is symmetric and orthonormal, so it is its own inverse).
W is applied as H_8 (x) H_{h/8}: a head as an 8 x h/8 matrix X, y = H_8 X H_{h/8} / sqrt(h) (two
products with an 8- or 16-wide matrix -- far faster here than one h x h product).
Error bound: per head, ||x_k - x_hat_k||_2 = ||y_k - y_hat_k||_2 <= the L2 norm of the base format's
per-element bound on y_k (plus float32 rounding of the two rotations). NaN/Inf input is refused, as
is a head whose scale exceeds fp16's range after rotation.

Worked example, int6h64r, D = 64, x = [8, 0, 0 ...] (one outlier channel): y = x @ W = [1, 1, ..., 1]
(8 * H[0, j] / 8); int6h64 of y: scale fp16(1/31) = 0.032257 (0x2821), every code 31 + 32 = 63 ->
low plane ff ff ... (32 bytes), high plane ff ... (16 bytes), scale 21 28; y_hat = 31 * 0.032257 =
0.999969 everywhere; x_hat = y_hat @ W = [7.999756, 0, 0 ...]. (The gain is on rows where a large
channel shares a head with small ones: int6h64 gives the small ones a step of amax/31; after rotation
the step follows the head's spread, not its largest channel.)
"""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt

from pion.codecs.base import as_out_dtype, input_rows, non_finite_error, require_multiple
from pion.codecs.registry import get_codec
from pion.common.errors import CodecError


@cache
def sylvester(n: int) -> np.ndarray:
    """The n x n Sylvester Hadamard matrix (entries +-1), float32."""
    h = np.ones((1, 1), dtype=np.float32)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def rotate_heads(x: np.ndarray, head_dim: int) -> np.ndarray:
    """Rows [n, D] -> each head times W = H_h / sqrt(h), as a new float32 [n, D] array.

    A head is an 8 x h/8 matrix X and W = H_8 (x) H_{h/8}, so y = H_8 X H_{h/8} / sqrt(h): one
    2-D product along the inner axis, then one along the outer axis on the transposed copy (two
    plain [m, k] x [k, k] products; np.dot, because np.matmul measured up to 100x slower on these
shapes in benchmarks/codec_speed.py's loop over layers).
    """
    n, kv_dim = x.shape
    inner = head_dim // 8
    scaled = sylvester(inner) * np.float32(1 / np.sqrt(head_dim))
    y = np.dot(x.reshape(-1, inner), scaled).reshape(-1, 8, inner)
    t: np.ndarray = np.dot(np.ascontiguousarray(y.transpose(0, 2, 1)).reshape(-1, 8), sylvester(8))
    return np.ascontiguousarray(t.reshape(-1, inner, 8).transpose(0, 2, 1)).reshape(n, kv_dim)


class RotatedPerHeadCodec:
    """A per-head base format on Hadamard-rotated heads."""

    name = "rotated"
    base_name = "int6h64"
    head_dim = 64

    def row_bytes(self, kv_dim: int) -> int:
        return get_codec(self.base_name).row_bytes(kv_dim)

    def check_dim(self, kv_dim: int) -> None:
        require_multiple(kv_dim, self.head_dim, self.name)

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        x = input_rows(rows, self)
        if not np.isfinite(x).all():
            raise non_finite_error(x, self.name)
        try:
            return get_codec(self.base_name).encode(rotate_heads(x, self.head_dim))
        except CodecError as e:  # the base's range refusal, under this format's name
            raise CodecError(str(e).replace(self.base_name, self.name)) from None

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        self.check_dim(kv_dim)
        y = get_codec(self.base_name).decode(data, kv_dim)
        return as_out_dtype(rotate_heads(y, self.head_dim), out_dtype)


class Int6H64RotatedCodec(RotatedPerHeadCodec):
    """int6h64 on Hadamard-rotated 64-value heads: 3D/4 + D/32 bytes, 39.1% of fp16."""

    name, base_name, head_dim = "int6h64r", "int6h64", 64


class Int5H64RotatedCodec(RotatedPerHeadCodec):
    """int5h64 on Hadamard-rotated 64-value heads: 5D/8 + D/32 bytes, 32.8% of fp16."""

    name, base_name, head_dim = "int5h64r", "int5h64", 64


class Int6H128RotatedCodec(RotatedPerHeadCodec):
    """int6h128 on Hadamard-rotated 128-value heads: 3D/4 + D/64 bytes, 38.3% of fp16."""

    name, base_name, head_dim = "int6h128r", "int6h128", 128


class Int5H128RotatedCodec(RotatedPerHeadCodec):
    """int5h128 on Hadamard-rotated 128-value heads: 5D/8 + D/64 bytes, 32.0% of fp16."""

    name, base_name, head_dim = "int5h128r", "int5h128", 128
