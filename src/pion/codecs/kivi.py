"""``kivi4g{32,64,128}`` / ``kivi8g{32,64,128}``: K quantized per channel over a group of G tokens.

Why: K has outlier channels -- a few of its kv_dim channels carry most of its magnitude in
*every* token -- so a per-row (per-token) scale is set by the outliers and the other channels
get a handful of levels. KIVI (Liu et al., 2024) and KVQuant quantize K per *channel*: each
channel's range over a run of tokens is narrow, whatever its size. (V has no such channels and
is best per token: the V half of the KIVI pair is ``mlx4g32``, 4-bit asymmetric per token in
groups of 32 channels, which is exactly KIVI's V quantizer.)

The format still has a fixed size per row, so the V-store's row slicing, budgets and snapshots
work unchanged: a group's per-channel parameters are spread over the group's own G rows.

Layout, per row of D values, b = 4 or 8 bits (D*b/8 + 4*D/G bytes):
  [codes   b bits x D]       unsigned; b = 4: byte k = code 2k | code (2k+1) << 4
  [params  fp16 x 2*D/G]     this row's share of its group's parameters (below)

Token groups are counted from the first row of the blob (row 0 of the layer in the V-store):
rows [G*j, G*j + G) are group j. A blob of n rows holds n // G *full groups* and, when
n % G != 0, a *tail* of the last n % G rows.

Full group (per channel c, over the G rows):
  scale_c = fp16((max_c - min_c) / L),  bias_c = fp16(min_c),  L = 2^b - 1
  code    = clip(round_half_even((x - bias_c) / scale_c), 0, L);  x_hat = code * scale_c + bias_c
  P = [scale_0 .. scale_{D-1}, bias_0 .. bias_{D-1}]  (2*D fp16), row r of the group holds
  P[r * 2D/G : (r+1) * 2D/G].
Tail row (each row on its own; it has only 2*D/G parameter slots, so it is quantized per token,
symmetric, in 2*D/G channel groups of G/2):
  s_g  = fp16(amax_g / M),  M = 2^(b-1) - 1  (7 or 127)
  code = clip(round_half_even(x / s_g), -M, M) + 2^(b-1);  x_hat = (code - 2^(b-1)) * s_g
So a prefix whose length is not a multiple of G keeps its last n % G tokens at per-token
precision (they move to per-channel when a V.STOREBATCH re-sends them with the rows that fill
the group). Needs D % 32 == 0 and D % (G/2) == 0 (kivi?g128: D % 64 == 0).

Error bounds per element: full group |x - x_hat| <= scale_c/2 + |min_c - bias_c|
+ L*|(max_c - min_c)/L - scale_c|; tail |x - x_hat| <= s_g/2 + M*|amax_g/M - s_g|.
NaN/Inf input is refused, as are parameters beyond fp16's range.

Worked example, kivi4g32, D = 32, 32 rows x[t, c] = t/8 + (c == 0) * 100 (channel 0 is an
outlier channel: 100 .. 103.875; the others 0 .. 3.875):
  channel 0: min 100, max 103.875, 3.875/15 = 0.258333 -> fp16 0.258301 (0x3422), bias 100 (0x5640)
  channels 1..31: min 0, max 3.875 -> scale 0.258301 (0x3422), bias 0 (0x0000)
  row 5 (t = 5, x = 0.625 / 100.625): (0.625 - 0) / 0.258301 = 2.42 -> code 2 in every channel
  row 5 bytes = 22 22 ... 22 (16 bytes) | scales of channels 10, 11 = 22 34 22 34
  (row r holds P[2r], P[2r+1]: rows 0..15 the 32 scales, rows 16..31 the 32 biases;
   row 16 params = 40 56 00 00 -- bias of channel 0 = 100, of channel 1 = 0)
  decoded x_hat[5, 0] = 2 * 0.258301 + 100 = 100.5166, x_hat[5, 1] = 0.5166.
  (int8 per row would give the 31 small channels a step of 100.625/127 = 0.79; here 0.26 at 4 bits.)
"""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt

from pion.codecs.base import (
    GROUP_SIZE,
    as_out_dtype,
    blob_rows,
    fp16_params,
    input_rows,
    non_finite_error,
    require_multiple,
    safe_divisor,
)

TOKEN_GROUPS = (32, 64, 128)


@cache
def _nibble_table() -> np.ndarray:
    """byte -> (low nibble, high nibble) as two float32 codes packed in one uint64."""
    pairs = np.empty((256, 2), dtype=np.float32)
    index = np.arange(256)
    pairs[:, 0] = index & 0xF
    pairs[:, 1] = index >> 4
    return pairs.view(np.uint64).reshape(256)


class KiviCodec:
    """b-bit codes, K-style: per-channel scale/bias over G-token groups, per-token tail rows."""

    name = "kivi"
    bits = 4
    token_group = 32

    @property
    def _levels(self) -> int:
        return (1 << self.bits) - 1

    @property
    def _half(self) -> int:
        return 1 << (self.bits - 1)

    def _param_slots(self, kv_dim: int) -> int:
        return 2 * kv_dim // self.token_group

    def row_bytes(self, kv_dim: int) -> int:
        return kv_dim * self.bits // 8 + 2 * self._param_slots(kv_dim)

    def check_dim(self, kv_dim: int) -> None:
        require_multiple(kv_dim, max(GROUP_SIZE, self.token_group // 2), self.name)

    # ---- encode ----------------------------------------------------------------------------------

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        x = input_rows(rows, self)
        n, kv_dim = x.shape
        if not np.isfinite(x).all():
            raise non_finite_error(x, self.name)
        g = self.token_group
        n_full = n // g
        codes = np.empty((n, kv_dim), dtype=np.uint8)
        params = np.empty((n, self._param_slots(kv_dim)), dtype=np.float32)
        if n_full:
            self._encode_groups(x[: n_full * g].reshape(n_full, g, kv_dim), codes, params)
        if n % g:
            self._encode_tail(x[n_full * g:], codes[n_full * g:], params[n_full * g:])
        out = np.empty((n, self.row_bytes(kv_dim)), dtype=np.uint8)
        code_bytes = kv_dim * self.bits // 8
        if self.bits == 4:
            np.bitwise_or(codes[:, 0::2], codes[:, 1::2] << 4, out=out[:, :code_bytes])
        else:
            out[:, :code_bytes] = codes
        out[:, code_bytes:].view("<f2")[:] = params
        return out.tobytes()

    def _encode_groups(self, groups: np.ndarray, codes: np.ndarray, params: np.ndarray) -> None:
        """Full token groups [j, G, D]: per-channel affine codes; params spread over the G rows."""
        n_groups, g, kv_dim = groups.shape
        lo = groups.min(axis=1)
        hi = groups.max(axis=1)
        with np.errstate(over="ignore"):
            span = (hi - lo) / np.float32(self._levels)
        scale = fp16_params(span, groups.reshape(-1, kv_dim), self.name, "channel scale")
        bias = fp16_params(lo, groups.reshape(-1, kv_dim), self.name, "channel bias")
        q = np.subtract(groups, bias[:, None, :])
        np.divide(q, safe_divisor(scale)[:, None, :], out=q)
        np.rint(q, out=q)
        np.clip(q, 0, self._levels, out=q)
        codes[: n_groups * g] = q.reshape(-1, kv_dim).astype(np.uint8)
        per_group = np.concatenate([scale, bias], axis=1)  # [j, 2D]
        params[: n_groups * g] = per_group.reshape(n_groups * g, -1)

    def _encode_tail(self, tail: np.ndarray, codes: np.ndarray, params: np.ndarray) -> None:
        """Tail rows [t, D]: per-token symmetric codes in channel groups of G/2."""
        t, kv_dim = tail.shape
        slots = self._param_slots(kv_dim)
        groups = tail.reshape(t, slots, kv_dim // slots)
        amax = np.abs(groups).max(axis=2)
        top = self._half - 1
        scale = fp16_params(amax / np.float32(top), tail, self.name, "tail scale")
        q = np.divide(groups, safe_divisor(scale)[:, :, None])
        np.rint(q, out=q)
        np.clip(q, -top, top, out=q)
        q += self._half
        codes[:] = q.reshape(t, kv_dim).astype(np.uint8)
        params[:] = scale

    # ---- decode ----------------------------------------------------------------------------------

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        self.check_dim(kv_dim)
        raw = blob_rows(data, kv_dim, self.row_bytes(kv_dim))
        n = raw.shape[0]
        g = self.token_group
        n_full = n // g
        code_bytes = kv_dim * self.bits // 8
        params = raw[:, code_bytes:].view("<f2")
        out = self._codes(raw[:, :code_bytes], n, kv_dim)
        if n_full:
            per_group = params[: n_full * g].reshape(n_full, 2 * kv_dim).astype(np.float32)
            view = out[: n_full * g].reshape(n_full, g, kv_dim)
            view *= per_group[:, None, :kv_dim]
            view += per_group[:, None, kv_dim:]
        if n % g:
            scale = params[n_full * g:].astype(np.float32)
            tail = out[n_full * g:].reshape(n - n_full * g, scale.shape[1], -1)
            tail -= np.float32(self._half)
            tail *= scale[:, :, None]
        return as_out_dtype(out, out_dtype)

    def _codes(self, packed: np.ndarray, n: int, kv_dim: int) -> np.ndarray:
        """The unsigned codes as a new float32 [n, D] array.

        4-bit: one table gather expands a byte into two float32 values; letting the gather
        allocate its result (rather than gathering into a preallocated array) measured 3x faster
        in benchmarks/codec_speed.py.
        """
        if self.bits == 4:
            pairs: np.ndarray = _nibble_table()[packed]
            return pairs.view(np.float32).reshape(n, kv_dim)
        return packed.astype(np.float32)


class Kivi4G32Codec(KiviCodec):
    """4-bit K per channel over 32-token groups: 31% of fp16's bytes."""

    name, bits, token_group = "kivi4g32", 4, 32


class Kivi4G64Codec(KiviCodec):
    """4-bit K per channel over 64-token groups: 28% of fp16's bytes."""

    name, bits, token_group = "kivi4g64", 4, 64


class Kivi4G128Codec(KiviCodec):
    """4-bit K per channel over 128-token groups: 27% of fp16's bytes."""

    name, bits, token_group = "kivi4g128", 4, 128


class Kivi8G32Codec(KiviCodec):
    """8-bit K per channel over 32-token groups: 56% of fp16's bytes."""

    name, bits, token_group = "kivi8g32", 8, 32


class Kivi8G64Codec(KiviCodec):
    """8-bit K per channel over 64-token groups: 53% of fp16's bytes."""

    name, bits, token_group = "kivi8g64", 8, 64


class Kivi8G128Codec(KiviCodec):
    """8-bit K per channel over 128-token groups: 52% of fp16's bytes."""

    name, bits, token_group = "kivi8g128", 8, 128
