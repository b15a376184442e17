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

Two layers: ``pack_arrays`` / ``unpack_arrays`` work on numpy arrays with their dtype code and
import no torch (the MLX runtime's recurrent states use them); ``encode_arrays`` /
``decode_arrays`` are the torch tensors' wrappers (torch is imported when they are called).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

FORMAT_VERSION = 1
CODE_FP32, CODE_FP16, CODE_BF16 = 0, 1, 2
_U32 = struct.Struct("<I")
_WIRE_NP: dict[int, str] = {CODE_FP32: "<f4", CODE_FP16: "<f2", CODE_BF16: "<f4"}  # bf16 travels as its fp32 values


class StateBlobError(ValueError):
    """Bytes that are not a version-1 state blob (truncated, unknown version or dtype code)."""


def pack_arrays(arrays: Sequence[tuple[np.ndarray, int] | None]) -> bytes:
    """Serialize ``(values, dtype code)`` pairs (None for an absent array) into one blob.

    ``values`` must already be in the code's wire dtype (fp32 for codes 0 and 2, fp16 for 1).
    """
    parts = [_U32.pack(FORMAT_VERSION), _U32.pack(len(arrays))]
    for item in arrays:
        if item is None:
            parts += [_U32.pack(1), _U32.pack(0), _U32.pack(0)]
            continue
        values, code = item
        if code not in _WIRE_NP:
            raise StateBlobError(f"unknown dtype code {code} for a state blob")
        wire = np.dtype(_WIRE_NP[code])
        if values.dtype.kind != "f" or values.dtype.itemsize != wire.itemsize:
            raise StateBlobError(f"dtype code {code} needs {wire} values, got {values.dtype}")
        parts.append(_U32.pack(values.ndim))
        parts += [_U32.pack(int(d)) for d in values.shape]
        parts.append(_U32.pack(code))
        parts.append(np.ascontiguousarray(values, dtype=wire).tobytes())
    return b"".join(parts)


def unpack_arrays(blob: bytes | memoryview) -> list[tuple[np.ndarray, int] | None]:
    """The ``(values, dtype code)`` pairs of a blob (values in the wire dtype, read-only views of ``blob``)."""
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
    arrays: list[tuple[np.ndarray, int] | None] = []
    for _ in range(u32()):
        shape = [u32() for _ in range(u32())]
        code = u32()
        if code not in _WIRE_NP:
            raise StateBlobError(f"unknown dtype code {code} in state blob")
        np_dtype = _WIRE_NP[code]
        count = int(np.prod(shape)) if shape else 1
        if shape == [0]:
            arrays.append(None)
            continue
        size = count * np.dtype(np_dtype).itemsize
        if pos + size > len(view):
            raise StateBlobError(f"state blob holds {len(view) - pos} bytes for an array needing {size}")
        arrays.append((np.frombuffer(view[pos:pos + size], dtype=np_dtype).reshape(shape), code))
        pos += size
    if pos != len(view):
        raise StateBlobError(f"{len(view) - pos} stray bytes after the last array of the state blob")
    return arrays


def _torch_codes() -> dict[torch.dtype, int]:
    import torch

    return {torch.float32: CODE_FP32, torch.float16: CODE_FP16, torch.bfloat16: CODE_BF16}


def encode_arrays(arrays: Sequence[torch.Tensor | None]) -> bytes:
    """Serialize tensors (any device; None for an absent array) into one blob."""
    import torch

    codes = _torch_codes()
    items: list[tuple[np.ndarray, int] | None] = []
    for tensor in arrays:
        if tensor is None:
            items.append(None)
            continue
        code = codes.get(tensor.dtype)
        if code is None:
            raise StateBlobError(f"dtype {tensor.dtype} has no state-blob code (fp32, fp16, bf16 only)")
        wire_dtype = torch.float32 if code == CODE_BF16 else tensor.dtype
        items.append((tensor.detach().to("cpu", wire_dtype).contiguous().numpy(), code))
    return pack_arrays(items)


def decode_arrays(blob: bytes | memoryview, device: torch.device | str = "cpu") -> list[torch.Tensor | None]:
    """The tensors of a blob, in their original dtypes (bf16 restored from its fp32 values)."""
    import torch

    dtypes = {code: dtype for dtype, code in _torch_codes().items()}
    out: list[torch.Tensor | None] = []
    for item in unpack_arrays(blob):
        if item is None:
            out.append(None)
            continue
        values, code = item
        out.append(torch.from_numpy(values.copy()).to(device=device, dtype=dtypes[code]))
    return out
