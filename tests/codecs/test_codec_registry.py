"""The registry, exact byte sizes and the dims each format accepts."""

from __future__ import annotations

import pytest

from pion.codecs import Codec, codec_names, get_codec, register_codec
from pion.common.errors import CodecError

# bytes per row at D = 32, 192, 1024, from the layouts in docs/formats.md
ROW_BYTES = {
    "fp32": (128, 768, 4096),
    "fp16": (64, 384, 2048),
    "int8": (34, 194, 1026),
    "fp8": (34, 204, 1088),
    "turbo4": (18, 108, 576),
    "turbo3": (14, 84, 448),
    "turbo2": (10, 60, 320),
    "mlx4g32": (20, 120, 640),
}
GROUPED = ["fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"]
# issue 20 (sizes checked in test_kivi_and_per_head_codecs.py)
ISSUE_20 = [f"kivi{b}g{g}" for b in (4, 5, 6, 7, 8) for g in (32, 64, 128)] + [
    "int8h64", "int8h128", "fp8h64", "fp8h128", "int6h64", "int6h128", "int5h64", "int5h128",
    "int7h64", "int7h128",
    "kivi6g128s", "kivi5g128s", "kivi7g128s", "int5h64s128", "int6h64s128", "int7h64s128", "int6h128s128",
    "int7h128s128", "int6h64r", "int5h64r", "int6h128r", "int5h128r", "int6h64rs128", "int5h64rs128",
    "int4h64", "kivi8g128s", "int4h64s128"]


def test_the_registry_lists_the_spec_formats_and_the_issue_20_ones() -> None:
    assert codec_names() == sorted([*ROW_BYTES, *ISSUE_20])


@pytest.mark.parametrize("name", ISSUE_20)
def test_the_issue_20_formats_satisfy_the_codec_protocol(name: str) -> None:
    codec = get_codec(name)
    assert isinstance(codec, Codec)
    assert codec.name == name


@pytest.mark.parametrize("name", sorted(ROW_BYTES))
def test_row_bytes_are_exact_at_d32_d192_and_d1024(name: str) -> None:
    codec = get_codec(name)
    assert isinstance(codec, Codec)
    assert codec.name == name
    assert tuple(codec.row_bytes(d) for d in (32, 192, 1024)) == ROW_BYTES[name]


@pytest.mark.parametrize("name", ["turbo4", "turbo3", "turbo2"])
def test_turbo_sizes_stay_within_the_issue_limit(name: str) -> None:
    bits = int(name[-1])
    for d in (32, 192, 512, 1024, 4096):
        assert get_codec(name).row_bytes(d) <= d * bits // 8 + d // 16 + 4


def test_an_unknown_format_is_refused_with_the_known_names() -> None:
    with pytest.raises(CodecError) as info:
        get_codec("int4")
    assert str(info.value) == f"unknown format 'int4' (known: {', '.join(codec_names())})"
    assert codec_names()[:5] == ["fp16", "fp32", "fp8", "fp8h128", "fp8h64"]


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_codec("fp8", "pion.codecs.fp8", "Fp8E4M3Group32Codec")


@pytest.mark.parametrize("name", GROUPED)
@pytest.mark.parametrize("kv_dim", [100, 16, 33, 200])
def test_group_formats_refuse_a_dim_that_is_not_a_multiple_of_32(name: str, kv_dim: int) -> None:
    with pytest.raises(CodecError) as info:
        get_codec(name).check_dim(kv_dim)
    assert str(info.value) == f"kv_dim must be a multiple of 32 for {name}"


@pytest.mark.parametrize("name", sorted(ROW_BYTES))
@pytest.mark.parametrize("kv_dim", [0, -32])
def test_every_format_refuses_a_dim_below_one(name: str, kv_dim: int) -> None:
    with pytest.raises(CodecError, match="kv_dim must be a positive integer"):
        get_codec(name).check_dim(kv_dim)


@pytest.mark.parametrize("name", ["fp32", "fp16", "int8"])
def test_row_formats_accept_any_positive_dim(name: str) -> None:
    for kv_dim in (1, 3, 100, 192):
        get_codec(name).check_dim(kv_dim)


@pytest.mark.parametrize("name", GROUPED)
def test_encode_and_decode_refuse_a_bad_dim_too(name: str) -> None:
    import numpy as np

    codec = get_codec(name)
    with pytest.raises(CodecError, match=f"kv_dim must be a multiple of 32 for {name}"):
        codec.encode(np.zeros((2, 100), dtype=np.float32))
    with pytest.raises(CodecError, match=f"kv_dim must be a multiple of 32 for {name}"):
        codec.decode(b"", 100)
