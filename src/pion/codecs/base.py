"""The codec contract: how one storage format turns float rows into bytes and back.

A row is one token's ``kv_dim`` values for one layer (the spec's [N, H*D] layout).
Codecs are stateless and vectorized over all rows of a batch at once.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt


@runtime_checkable
class Codec(Protocol):
    """One storage format.

    ``encode`` is called by the server on every V.STOREBATCH (and by clients that
    encode locally); ``decode`` on every V.FETCH that is not ``DTYPE raw``.
    Both raise ``pion.common.errors.CodecError`` on bad input and never return
    partial results.
    """

    name: str

    def row_bytes(self, kv_dim: int) -> int:
        """Exact encoded size of one row."""
        ...

    def check_dim(self, kv_dim: int) -> None:
        """Raise CodecError if this format cannot store rows of ``kv_dim`` values."""
        ...

    def encode(self, rows: npt.NDArray[np.float32]) -> bytes:
        """Encode float32 rows of shape [n, kv_dim] into n * row_bytes(kv_dim) bytes."""
        ...

    def decode(self, data: bytes | memoryview, kv_dim: int, out_dtype: npt.DTypeLike = np.float32) -> np.ndarray:
        """Decode n * row_bytes(kv_dim) bytes into an [n, kv_dim] array of ``out_dtype``."""
        ...
