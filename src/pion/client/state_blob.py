"""The reference SSM state blob: a list of arrays as bytes (the original design's format, version 1).

pion-server never parses these (SSM.PREFIX.* stores opaque bytes); this is the format the
client writes and reads. All integers are little-endian u32::

    version   = 1
    n_arrays
    per array:
        ndim
        shape[ndim]
        dtype_code   0 = fp32, 1 = fp16, 2 = bf16 (its values serialized as fp32: lossless)
        raw bytes    prod(shape) elements, little-endian, row-major
                     (4 bytes each for codes 0 and 2, 2 bytes for code 1)

An array a layer does not have (LFM2's short-conv layers keep no recurrent state) is written
as ndim 1, shape [0], code 0, no bytes, and read back as None.

Worked example: one fp16 array of shape [2] holding [1.0, -2.0]::

    01 00 00 00 | 01 00 00 00 | 01 00 00 00 | 02 00 00 00 | 01 00 00 00 | 00 3c 00 c0
    version=1     n_arrays=1    ndim=1        shape[0]=2    fp16          1.0   -2.0
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import torch

FORMAT_VERSION = 1
_U32 = struct.Struct("<I")
_CODES: dict[torch.dtype, int] = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_WIRE: dict[int, tuple[str, torch.dtype]] = {0: ("<f4", torch.float32), 1: ("<f2", torch.float16),
                                              2: ("<f4", torch.bfloat16)}


class StateBlobError(ValueError):
    """Bytes that are not a version-1 state blob (truncated, unknown version or dtype code)."""


def encode_arrays(arrays: Sequence[torch.Tensor | None]) -> bytes:
    """Serialize tensors (any device; None for an absent array) into one blob."""
    parts = [_U32.pack(FORMAT_VERSION), _U32.pack(len(arrays))]
    for tensor in arrays:
        if tensor is None:
            parts += [_U32.pack(1), _U32.pack(0), _U32.pack(0)]
            continue
        code = _CODES.get(tensor.dtype)
        if code is None:
            raise StateBlobError(f"dtype {tensor.dtype} has no state-blob code (fp32, fp16, bf16 only)")
        wire_dtype = torch.float32 if code == 2 else tensor.dtype
        data = tensor.detach().to("cpu", wire_dtype).contiguous().numpy()
        parts.append(_U32.pack(tensor.dim()))
        parts += [_U32.pack(int(d)) for d in tensor.shape]
        parts.append(_U32.pack(code))
        parts.append(data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes())
    return b"".join(parts)


def decode_arrays(blob: bytes | memoryview, device: torch.device | str = "cpu") -> list[torch.Tensor | None]:
    """The tensors of a blob, in their original dtypes (bf16 restored from its fp32 values)."""
    view = memoryview(blob)
    pos = 0

    def u32() -> int:
        nonlocal pos
        if pos + 4 > len(view):
            raise StateBlobError(f"state blob ends at byte {len(view)} inside a header field")
        value = _U32.unpack_from(view, pos)[0]
        pos += 4
        return int(value)

    version = u32()
    if version != FORMAT_VERSION:
        raise StateBlobError(f"state blob version {version} is not {FORMAT_VERSION}")
    arrays: list[torch.Tensor | None] = []
    for _ in range(u32()):
        shape = [u32() for _ in range(u32())]
        code = u32()
        if code not in _WIRE:
            raise StateBlobError(f"unknown dtype code {code} in state blob")
        np_dtype, torch_dtype = _WIRE[code]
        count = int(np.prod(shape)) if shape else 1
        if shape == [0]:
            arrays.append(None)
            continue
        size = count * np.dtype(np_dtype).itemsize
        if pos + size > len(view):
            raise StateBlobError(f"state blob holds {len(view) - pos} bytes for an array needing {size}")
        values = np.frombuffer(view[pos:pos + size], dtype=np_dtype).reshape(shape)
        pos += size
        arrays.append(torch.from_numpy(values.copy()).to(device=device, dtype=torch_dtype))
    if pos != len(view):
        raise StateBlobError(f"{len(view) - pos} stray bytes after the last array of the state blob")
    return arrays
