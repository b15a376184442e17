"""The server's one integer parser and one float parser, and the error-text builders."""

from __future__ import annotations

import pytest

from pion.common.errors import CodecError, CommandError
from pion.server.commands.store_args import parse_float, parse_int, parse_ms, parse_redis_int
from pion.server.errors import codec_error, oom_error, wal_misconf


@pytest.mark.parametrize("raw, value", [(b"0", 0), (b"-12", -12), (b"70", 70),
                                        (b"9223372036854775807", 2**63 - 1),
                                        (b"-9223372036854775808", -(2**63))])
def test_redis_integers_parse_like_redis_string2ll(raw: bytes, value: int) -> None:
    assert parse_redis_int(raw) == value


@pytest.mark.parametrize("raw", [b"", b"+1", b" 1", b"1 ", b"1_0", b"1.5", b"-", b"0x10", b"007", b"-0",
                                 b"9223372036854775808", b"1" * 21, b"9" * 5000])
def test_anything_else_gets_exactly_redis_error_text(raw: bytes) -> None:
    with pytest.raises(CommandError) as err:
        parse_redis_int(raw)
    assert (err.value.code, err.value.message) == ("ERR", "value is not an integer or out of range")


def test_a_named_integer_says_which_argument_and_which_range() -> None:
    with pytest.raises(CommandError) as err:
        parse_int(b"x", "layer", 0, 511)
    assert err.value.message == "value is not an integer or out of range (layer)"
    with pytest.raises(CommandError) as err:
        parse_int(b"600", "layer", 0, 511)
    assert err.value.message == "layer must be 0..511, got 600"
    with pytest.raises(CommandError) as err:
        parse_int(b"-1", "start_id")
    assert err.value.message == "start_id must be >= 0, got -1"
    assert parse_int(b"511", "layer", 0, 511) == 511


def test_floats_must_be_finite_and_in_range() -> None:
    assert (parse_float(b"-0.5", "THRESHOLD"), parse_ms(b"12.5", "PREFILL_MS")) == (-0.5, 12.5)
    for raw, text in ((b"high", "value is not a valid float (THRESHOLD)"),
                      (b"inf", "THRESHOLD must be a finite number, got inf")):
        with pytest.raises(CommandError) as err:
            parse_float(raw, "THRESHOLD")
        assert err.value.message == text
    with pytest.raises(CommandError) as err:
        parse_ms(b"-1", "PREFILL_MS")
    assert err.value.message == "PREFILL_MS must be a finite number >= 0, got -1"


def test_error_builders_carry_redis_codes_and_one_misconf_text() -> None:
    misconf = wal_misconf("pion.vstore.0.wal", "fsync failed: Input/output error")
    assert (misconf.code, misconf.message) == (
        "MISCONF", "Errors writing to the WAL (pion.vstore.0.wal): fsync failed: Input/output error. "
        "Writes are refused until the WAL can be written again; reads keep working.")
    assert (oom_error().code, oom_error().message) == ("OOM", "command not allowed when used memory > 'maxmemory'.")
    converted = codec_error(CodecError("kv_dim 33 is not a multiple of 32"))
    assert (converted.code, converted.message) == ("ERR", "kv_dim 33 is not a multiple of 32")
