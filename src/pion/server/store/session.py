"""One V-store session: per-layer rows of one token each, kept encoded in growable buffers.

A session is ``(sid, kv_dim, formats)``. A *uniform* session has one storage
format for every layer and accepts any layer index below ``MAX_LAYERS``; a
*schema* session fixes ``n_layers`` and a format per layer (boundary-protected
prefixes keep the outer layers fp16 and the middle ones quantized).

Each layer is a contiguous run of rows for token ids ``0 .. n_rows-1`` stored in
the layer's encoded format (``codec.row_bytes(kv_dim)`` bytes per row) in a
numpy ``uint8`` buffer. Buffers grow by doubling, never per token, and a grown
buffer is a *new* array: memoryviews handed out by ``fetch`` keep the old one
alive, so a reply being written is never resized under the writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pion.codecs import Codec, get_codec
from pion.common.errors import CommandError
from pion.common.ids import SessionId

MAX_LAYERS = 4096
MIN_CAPACITY_ROWS = 16
# Input dtypes a client may send rows in, and their bytes per value.
INPUT_DTYPES = {"f32": ("<f4", 4), "f16": ("<f2", 2)}
# The storage format whose encoding equals an input dtype: stored without re-encoding.
SAME_ENCODING = {"fp32": "f32", "fp16": "f16"}


class LayerBuffer:
    """Encoded rows of one layer, contiguous from token 0."""

    __slots__ = ("codec", "row_bytes", "n_rows", "_buf")

    def __init__(self, codec: Codec, row_bytes: int) -> None:
        self.codec = codec
        self.row_bytes = row_bytes
        self.n_rows = 0
        self._buf = np.empty(0, dtype=np.uint8)

    @property
    def capacity_rows(self) -> int:
        return len(self._buf) // self.row_bytes

    @property
    def nbytes(self) -> int:
        """Bytes of stored rows (what budgets and snapshots count)."""
        return self.n_rows * self.row_bytes

    @property
    def allocated_bytes(self) -> int:
        return len(self._buf)

    def write(self, start_id: int, encoded: memoryview | bytes) -> int:
        """Copy whole encoded rows in at ``start_id`` (<= n_rows, checked by the caller).

        The first write into an empty layer adopts an immutable ``bytes`` blob (the
        request's own buffer) without copying; the next write copies it out first.
        """
        n_new = len(encoded) // self.row_bytes
        end = start_id + n_new
        owner = encoded.obj if isinstance(encoded, memoryview) else encoded
        if self.n_rows == 0 and type(owner) is bytes and len(owner) == len(encoded):
            self._buf = np.frombuffer(owner, dtype=np.uint8)
            self.n_rows = n_new
            return n_new
        if end > self.capacity_rows or not self._buf.flags.writeable:
            self._grow(end)
        lo = start_id * self.row_bytes
        self._buf[lo:lo + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
        self.n_rows = max(self.n_rows, end)
        return self.n_rows

    def _grow(self, need_rows: int) -> None:
        """Move to a new, writable buffer of at least ``need_rows`` rows (doubling)."""
        if need_rows <= self.capacity_rows:
            new_rows = self.capacity_rows  # copy-on-write of an adopted request buffer
        elif self.capacity_rows == 0:
            new_rows = need_rows  # first write: exact fit (a prefix is usually stored in one batch)
        else:
            new_rows = max(need_rows, 2 * self.capacity_rows, MIN_CAPACITY_ROWS)
        grown = np.empty(new_rows * self.row_bytes, dtype=np.uint8)
        grown[: self.nbytes] = self._buf[: self.nbytes]
        self._buf = grown

    def raw(self, start_id: int, end_id: int) -> memoryview:
        """Zero-copy view of encoded rows ``start_id .. end_id-1``."""
        return self._buf[start_id * self.row_bytes: end_id * self.row_bytes].data

    def gather_raw(self, ids: list[int]) -> np.ndarray:
        """Encoded rows for arbitrary ids, in the order given (a copy)."""
        rows = self._buf[: self.nbytes].reshape(-1, self.row_bytes)
        return rows[np.asarray(ids, dtype=np.int64)].reshape(-1)


@dataclass
class Session:
    """A V-store session: sid, kv_dim, per-layer formats and their buffers."""

    sid: SessionId
    kv_dim: int
    formats: tuple[str, ...]
    uniform: bool
    layers: dict[int, LayerBuffer] = field(default_factory=dict)
    n_fetches: int = 0
    last_access: float = 0.0

    @property
    def n_layers_declared(self) -> int | None:
        """n_layers of a schema session; None for a uniform one (any layer index)."""
        return None if self.uniform else len(self.formats)

    @property
    def format_label(self) -> str:
        return self.formats[0] if self.uniform else "schema"

    def format_of(self, layer: int) -> str:
        return self.formats[0] if self.uniform else self.formats[layer]

    def check_layer(self, layer: int) -> None:
        limit = MAX_LAYERS if self.uniform else len(self.formats)
        if not 0 <= layer < limit:
            raise CommandError(f"layer {layer} out of range for session '{self.sid}' (0..{limit - 1})")

    def rows_in(self, layer: int) -> int:
        buf = self.layers.get(layer)
        return 0 if buf is None else buf.n_rows

    def layer_buffer(self, layer: int) -> LayerBuffer:
        """The layer's buffer, created empty on first use."""
        buf = self.layers.get(layer)
        if buf is None:
            codec = get_codec(self.format_of(layer))
            buf = LayerBuffer(codec, codec.row_bytes(self.kv_dim))
            self.layers[layer] = buf
        return buf

    @property
    def nbytes(self) -> int:
        return sum(buf.nbytes for buf in self.layers.values())

    @property
    def allocated_bytes(self) -> int:
        return sum(buf.allocated_bytes for buf in self.layers.values())

    def same_shape(self, kv_dim: int, formats: tuple[str, ...], uniform: bool) -> bool:
        return (self.kv_dim, self.formats, self.uniform) == (kv_dim, formats, uniform)


def check_formats(kv_dim: int, formats: tuple[str, ...]) -> None:
    """Every format exists and can store rows of ``kv_dim``; CodecError otherwise."""
    for name in dict.fromkeys(formats):
        get_codec(name).check_dim(kv_dim)
