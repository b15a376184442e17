"""``kivi{4,5,6,7,8}g{32,64,128}``: K quantized per channel over a group of G tokens.

Why: K has outlier channels -- a few of its kv_dim channels carry most of its magnitude in
*every* token -- so a per-row (per-token) scale is set by the outliers and the other channels
get a handful of levels. KIVI (Liu et al., 2024) and KVQuant quantize K per *channel*: each
channel's range over a run of tokens is narrow, whatever its size. (V has no such channels and
is best per token: the V half of the KIVI pair is ``mlx4g32``, 4-bit asymmetric per token in
groups of 32 channels, which is exactly KIVI's V quantizer.)

The format still has a fixed size per row, so the V-store's row slicing, budgets and snapshots
work unchanged: a group's per-channel parameters are spread over the group's own G rows.

Layout, per row of D values, b = 4, 5, 6, 7 or 8 bits (D*b/8 + 4*D/G bytes):
  [codes   b bits x D]       unsigned; b = 4: byte k = code 2k | code (2k+1) << 4;
                             b = 5, 6, 7: a low-nibble plane then the high-bit planes (pion.codecs.bitplanes);
                             b = 8: one byte each
  [params  fp16 x 2*D/G]     this row's share of its group's parameters (below)

Token groups are counted from the first row of the blob (row 0 of the layer in the V-store):
rows [G*j, G*j + G) are group j. A blob of n rows holds n // G *full groups* and, when
n % G != 0, a *tail* of the last n % G rows.

Full group (per channel c, over the G rows):
  scale_c = fp16((max_c - min_c) / L),  bias_c = fp16(min_c),  L = 2^b - 1
  code    = clip(round_half_even((x - bias_c) / scale_c), 0, L);  x_hat = code * scale_c + bias_c
  P = [scale_0 .. scale_{D-1}, bias_0 .. bias_{D-1}]  (2*D fp16), row r of the group holds
  P[r * 2D/G : (r+1) * 2D/G].
Tail row (it has only 2*D/G parameter slots, so it is quantized per token, symmetric, in 2*D/G
channel groups of G/2), in one of two modes:
  plain:     v = x
  relative:  v = (x - c) / w, with c_c = bias_c + scale_c * L/2 and w_c = scale_c * L/2 (1 where 0)
             of the last full group before the tail (its channel ranges' centres and half-widths,
             in float32): K's outlier channels are divided out before the per-token codes
  s_g  = fp16(amax_g(v) / M),  M = 2^(b-1) - 1  (7, 15, 31, 63 or 127)
  code = clip(round_half_even(v / s_g), -M, M) + 2^(b-1);  v_hat = (code - 2^(b-1)) * s_g
  x_hat = v_hat (plain) or v_hat * w + c (relative)
A relative row stores its first scale negated (the sign bit is the flag; -0.0 for a zero scale).
The encoder makes a row relative when a full group precedes the tail and that gives the row a
smaller largest error; a tail with no full group before it is plain. So a prefix whose length is
not a multiple of G keeps its last n % G tokens at per-token precision, measured against the
previous group's ranges (they become a per-channel group when a V.STOREBATCH re-sends them with
the rows that fill the group). Needs D % 32 == 0 and D % (G/2) == 0 (kivi?g128: D % 64 == 0).

Error bounds per element: full group |x - x_hat| <= scale_c/2 + |min_c - bias_c|
+ L*|(max_c - min_c)/L - scale_c|; plain tail |x - x_hat| <= s_g/2 + M*|amax_g/M - s_g|;
relative tail w_c times that bound (of v) plus float32 rounding.
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
  A 33rd row [104, 4, 4, ...] is a relative tail row: c_0 = 100 + 0.258301 * 7.5 = 101.937256,
  w_0 = 1.937256, channels 1..31 c = w = 1.937256; v = 1.064773 everywhere, s = fp16(v/7) = 0.1521
  (0x30de), codes 7 -> 15: bytes ff ... ff (16) | de b0 de 30 (first scale negated = the flag);
  x_hat[32, 0] = 7 * 0.1521 * 1.937256 + 101.937256 = 103.99985.
"""

from __future__ import annotations

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
from pion.codecs.bitplanes import PLANE_BITS, pack, unpack
from pion.codecs.mlx4g32 import nibble_table
from pion.common.errors import CodecError

TOKEN_GROUPS = (32, 64, 128)


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
        reference = None
        if n_full:
            scale, bias = self._encode_groups(x[: n_full * g].reshape(n_full, g, kv_dim), codes, params)
            reference = self._reference(scale[-1], bias[-1])
        if n % g:
            self._encode_tail(x[n_full * g:], codes[n_full * g:], params[n_full * g:], reference)
        out = np.empty((n, self.row_bytes(kv_dim)), dtype=np.uint8)
        code_bytes = kv_dim * self.bits // 8
        if self.bits == 4:
            np.bitwise_or(codes[:, 0::2], codes[:, 1::2] << 4, out=out[:, :code_bytes])
        elif self.bits in PLANE_BITS:
            out[:, :code_bytes] = pack(codes, self.bits)
        else:
            out[:, :code_bytes] = codes
        out[:, code_bytes:].view("<f2")[:] = params
        return out.tobytes()

    def _encode_groups(self, groups: np.ndarray, codes: np.ndarray,
                       params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Full token groups [j, G, D]: per-channel affine codes; params spread over the G rows.

        Returns the (fp16-exact) scales and biases, [j, D] each.
        """
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
        return scale, bias

    def _reference(self, scale: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(centre, half-width) per channel of a full group's range, float32 [D]: what a relative
        tail row is measured against (a half-width of 0 is taken as 1)."""
        half = scale * np.float32(self._levels / 2)
        centre = bias + half
        width = np.where(half > 0, half, np.float32(1.0)).astype(np.float32)
        return centre.astype(np.float32), width

    def _symmetric(self, values: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-row symmetric codes of ``values`` [t, D] in ``slots`` channel groups: (signed codes as
        float32 [t, slots, D/slots], fp16-exact scales [t, slots]; +Inf where fp16 overflows)."""
        t, kv_dim = values.shape
        groups = values.reshape(t, slots, kv_dim // slots)
        top = self._half - 1
        with np.errstate(over="ignore"):
            scale = (np.abs(groups).max(axis=2) / np.float32(top)).astype(np.float16).astype(np.float32)
        q = np.divide(groups, np.where(np.isfinite(scale), safe_divisor(scale), np.inf)[:, :, None])
        np.rint(q, out=q)
        np.clip(q, -top, top, out=q)
        return q, scale

    def _encode_tail(self, tail: np.ndarray, codes: np.ndarray, params: np.ndarray,
                     reference: tuple[np.ndarray, np.ndarray] | None) -> None:
        """Tail rows [t, D]: per-token symmetric codes in channel groups of G/2, either of the values
        themselves (*plain*) or, after full groups, of (x - centre) / half-width of the last full
        group's channel ranges (*relative*: the outlier channels are divided out first). Each row
        takes whichever has the smaller largest error; relative rows carry a negative first scale."""
        t, kv_dim = tail.shape
        slots = self._param_slots(kv_dim)
        q, scale = self._symmetric(tail, slots)
        if not np.isfinite(scale).all():
            fp16_params(scale, tail, self.name, "tail scale")  # raises the overflow refusal
        if reference is not None:
            centre, width = reference
            rel_q, rel_scale = self._symmetric((tail - centre) / width, slots)
            plain_err = np.abs((q * scale[:, :, None]).reshape(t, kv_dim) - tail).max(axis=1)
            with np.errstate(invalid="ignore", over="ignore"):
                rel_hat = (rel_q * rel_scale[:, :, None]).reshape(t, kv_dim) * width + centre
                rel_err = np.abs(rel_hat - tail).max(axis=1)
            relative = np.isfinite(rel_scale).all(axis=1) & (rel_err < plain_err)
            q[relative] = rel_q[relative]
            scale[relative] = rel_scale[relative]
            scale[relative, 0] = -scale[relative, 0]  # the flag: sign bit of the first scale (also -0.0)
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
            bits = params[n_full * g:].view(np.uint16)
            relative = (bits[:, 0] & 0x8000) != 0
            scale = np.abs(params[n_full * g:].astype(np.float32))
            tail = out[n_full * g:]
            groups = tail.reshape(n - n_full * g, scale.shape[1], -1)
            groups -= np.float32(self._half)
            groups *= scale[:, :, None]
            if relative.any():
                if not n_full:
                    raise CodecError(f"{self.name}: the tail rows of this blob are relative to the token group "
                                     "before them; decode from a group boundary before the tail")
                last = params[(n_full - 1) * g: n_full * g].reshape(2 * kv_dim).astype(np.float32)
                centre, width = self._reference(last[:kv_dim], last[kv_dim:])
                rows = tail[relative]
                rows *= width
                rows += centre
                tail[relative] = rows
        return as_out_dtype(out, out_dtype)

    def _codes(self, packed: np.ndarray, n: int, kv_dim: int) -> np.ndarray:
        """The unsigned codes as a new float32 [n, D] array.

        4-bit: one table gather expands a byte into two float32 values; letting the gather
        allocate its result (rather than gathering into a preallocated array) measured 3x faster
        in benchmarks/codec_speed.py.
        """
        if self.bits == 4:
            pairs: np.ndarray = nibble_table()[packed]
            return pairs.view(np.float32).reshape(n, kv_dim)
        if self.bits in PLANE_BITS:
            return unpack(packed, kv_dim, self.bits)
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


class Kivi5G32Codec(KiviCodec):
    """5-bit K per channel over 32-token groups: 37.5% of fp16's bytes."""

    name, bits, token_group = "kivi5g32", 5, 32


class Kivi5G64Codec(KiviCodec):
    """5-bit K per channel over 64-token groups: 34.4% of fp16's bytes."""

    name, bits, token_group = "kivi5g64", 5, 64


class Kivi5G128Codec(KiviCodec):
    """5-bit K per channel over 128-token groups: 32.8% of fp16's bytes."""

    name, bits, token_group = "kivi5g128", 5, 128


class Kivi6G32Codec(KiviCodec):
    """6-bit K per channel over 32-token groups: 43.8% of fp16's bytes."""

    name, bits, token_group = "kivi6g32", 6, 32


class Kivi6G64Codec(KiviCodec):
    """6-bit K per channel over 64-token groups: 40.6% of fp16's bytes."""

    name, bits, token_group = "kivi6g64", 6, 64


class Kivi6G128Codec(KiviCodec):
    """6-bit K per channel over 128-token groups: 39.1% of fp16's bytes."""

    name, bits, token_group = "kivi6g128", 6, 128


class Kivi8G32Codec(KiviCodec):
    """8-bit K per channel over 32-token groups: 56% of fp16's bytes."""

    name, bits, token_group = "kivi8g32", 8, 32


class Kivi8G64Codec(KiviCodec):
    """8-bit K per channel over 64-token groups: 53% of fp16's bytes."""

    name, bits, token_group = "kivi8g64", 8, 64


class Kivi8G128Codec(KiviCodec):
    """8-bit K per channel over 128-token groups: 52% of fp16's bytes."""

    name, bits, token_group = "kivi8g128", 8, 128


class Kivi7G32Codec(KiviCodec):
    """7-bit K per channel over 32-token groups: 50% of fp16's bytes."""

    name, bits, token_group = "kivi7g32", 7, 32


class Kivi7G64Codec(KiviCodec):
    """7-bit K per channel over 64-token groups: 46.9% of fp16's bytes."""

    name, bits, token_group = "kivi7g64", 7, 64


class Kivi7G128Codec(KiviCodec):
    """7-bit K per channel over 128-token groups: 45.3% of fp16's bytes (the K side of a <= 40% pair
    with a 5-bit V)."""

    name, bits, token_group = "kivi7g128", 7, 128
