"""Name -> codec registry, resolved lazily (vLLM's connector-factory shape).

Each format family lives in its own module; the registry only records
``name -> (module, class)`` so importing pion.codecs stays cheap and a typo in
one format cannot break the others. Duplicate names are rejected.
"""

from __future__ import annotations

import importlib
from functools import cache

from pion.codecs.base import Codec
from pion.common.errors import CodecError

_LAZY: dict[str, tuple[str, str]] = {}


def register_codec(name: str, module: str, class_name: str) -> None:
    """Register a codec class by import path; raises ValueError on a duplicate name."""
    if name in _LAZY:
        raise ValueError(f"codec {name!r} is already registered")
    _LAZY[name] = (module, class_name)


@cache
def get_codec(name: str) -> Codec:
    """The codec instance for a format name; CodecError for an unknown name."""
    try:
        module_name, class_name = _LAZY[name]
    except KeyError:
        known = ", ".join(sorted(_LAZY))
        raise CodecError(f"unknown format '{name}' (known: {known})") from None
    codec: Codec = getattr(importlib.import_module(module_name), class_name)()
    return codec


def codec_names() -> list[str]:
    """Every registered format name, sorted."""
    return sorted(_LAZY)


register_codec("fp32", "pion.codecs.float_formats", "Float32Codec")
register_codec("fp16", "pion.codecs.float_formats", "Float16Codec")
register_codec("int8", "pion.codecs.int8", "Int8RowCodec")
register_codec("fp8", "pion.codecs.fp8", "Fp8E4M3Group32Codec")
register_codec("turbo4", "pion.codecs.turbo", "Turbo4Codec")
register_codec("turbo3", "pion.codecs.turbo", "Turbo3Codec")
register_codec("turbo2", "pion.codecs.turbo", "Turbo2Codec")
register_codec("mlx4g32", "pion.codecs.mlx4g32", "Mlx4Group32Codec")
# Issue 20: K per channel over token groups (the KIVI pair's K half; its V half is mlx4g32)
# and per-head int8/fp8 scales.
for _bits in (4, 8, 5, 6, 7):  # 5, 6 and 7: issue 20's <= 40% formats
    for _group in (32, 64, 128):
        register_codec(f"kivi{_bits}g{_group}", "pion.codecs.kivi", f"Kivi{_bits}G{_group}Codec")
register_codec("int8h64", "pion.codecs.per_head", "Int8H64Codec")
register_codec("int8h128", "pion.codecs.per_head", "Int8H128Codec")
register_codec("fp8h64", "pion.codecs.per_head", "Fp8H64Codec")
register_codec("fp8h128", "pion.codecs.per_head", "Fp8H128Codec")
register_codec("int6h64", "pion.codecs.per_head_narrow", "Int6H64Codec")
register_codec("int6h128", "pion.codecs.per_head_narrow", "Int6H128Codec")
register_codec("int5h64", "pion.codecs.per_head_narrow", "Int5H64Codec")
register_codec("int5h128", "pion.codecs.per_head_narrow", "Int5H128Codec")
register_codec("int7h64", "pion.codecs.per_head_narrow", "Int7H64Codec")
register_codec("int7h128", "pion.codecs.per_head_narrow", "Int7H128Codec")
register_codec("int4h64", "pion.codecs.per_head_narrow", "Int4H64Codec")  # fifth round: the per-layer menu's bottom
# Issue 20, third round: the first row of every 128-token group (the attention sink) in fp16.
register_codec("kivi6g128s", "pion.codecs.sink_rows", "Kivi6G128SinkCodec")
register_codec("kivi5g128s", "pion.codecs.sink_rows", "Kivi5G128SinkCodec")
register_codec("int6h64s128", "pion.codecs.sink_rows", "Int6H64SinkCodec")
register_codec("int7h64s128", "pion.codecs.sink_rows", "Int7H64SinkCodec")
register_codec("int6h128s128", "pion.codecs.sink_rows", "Int6H128SinkCodec")
register_codec("int7h128s128", "pion.codecs.sink_rows", "Int7H128SinkCodec")
register_codec("kivi7g128s", "pion.codecs.sink_rows", "Kivi7G128SinkCodec")
register_codec("int5h64s128", "pion.codecs.sink_rows", "Int5H64SinkCodec")
# Issue 20, fifth round: the per-layer menu's ends (8-bit K, 4-bit V), both with the sink row.
register_codec("kivi8g128s", "pion.codecs.sink_rows", "Kivi8G128SinkCodec")
register_codec("int4h64s128", "pion.codecs.sink_rows", "Int4H64SinkCodec")
# Issue 20, third round: per-head V on Hadamard-rotated heads (and with the sink row in fp16).
register_codec("int6h64r", "pion.codecs.rotated", "Int6H64RotatedCodec")
register_codec("int5h64r", "pion.codecs.rotated", "Int5H64RotatedCodec")
register_codec("int6h128r", "pion.codecs.rotated", "Int6H128RotatedCodec")
register_codec("int5h128r", "pion.codecs.rotated", "Int5H128RotatedCodec")
register_codec("int6h64rs128", "pion.codecs.sink_rows", "Int6H64RotatedSinkCodec")
register_codec("int5h64rs128", "pion.codecs.sink_rows", "Int5H64RotatedSinkCodec")
