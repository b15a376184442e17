"""V.* commands through a real pion-server with redis-py, in RESP2 and RESP3."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.procs import ServerProcess
from support.replies import err, stats

D = 64
_ids = itertools.count()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(request: pytest.FixtureRequest, shared_pion_server: ServerProcess) -> Iterator[redis.Redis]:
    with shared_pion_server.client(protocol=request.param) as client:
        yield client


def sid(tag: str = "s") -> str:
    return f"{tag}-{next(_ids)}"


def rows(n: int, dim: int = D, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def info(r: redis.Redis, name: str) -> dict[str, object]:
    reply = r.execute_command("V.INFO", name)
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}


def test_fp32_rows_round_trip_bit_exact(r: redis.Redis) -> None:
    s, data = sid(), rows(10)
    assert r.execute_command("V.CREATE", s, D) == b"OK"
    assert r.execute_command("V.STOREBATCH", s, 0, 0, data.tobytes()) == 10
    assert r.execute_command("V.FETCH", s, 0, "RANGE", 0, 10) == data.tobytes()
    assert r.execute_command("V.FETCH", s, 0, "RANGE", 3, 5, "DTYPE", "f16") == data[3:5].astype("<f2").tobytes()


def test_fp16_session_accepts_f16_rows_and_serves_raw_f16_and_f32(r: redis.Redis) -> None:
    s, data = sid(), rows(7).astype("<f2")
    r.execute_command("V.CREATE", s, D, "VQUANT", "fp16")
    assert r.execute_command("V.STOREBATCH", s, 2, 0, data.tobytes(), "DTYPE", "f16") == 7
    assert r.execute_command("V.FETCH", s, 2, "RANGE", 0, 7, "DTYPE", "f16") == data.tobytes()
    assert r.execute_command("V.FETCH", s, 2, "RANGE", 0, 7, "DTYPE", "raw") == data.tobytes()
    assert r.execute_command("V.FETCH", s, 2, "RANGE", 0, 7) == data.astype("<f4").tobytes()


def test_quantized_session_decodes_close_to_the_input(r: redis.Redis) -> None:
    s, data = sid(), rows(5)
    r.execute_command("V.CREATE", s, D, "VQUANT", "int8")
    r.execute_command("V.STOREBATCH", s, 0, 0, data.tobytes())
    back = np.frombuffer(r.execute_command("V.FETCH", s, 0, "RANGE", 0, 5), "<f4").reshape(5, D)
    assert float(np.abs(back - data).max()) < 0.05
    raw = r.execute_command("V.FETCH", s, 0, "RANGE", 0, 5, "DTYPE", "raw")
    assert len(raw) == 5 * 66  # int8 row: D codes + fp16 scale


def test_recreate_with_same_params_is_ok_and_with_other_params_is_refused(r: redis.Redis) -> None:
    s = sid()
    assert r.execute_command("V.CREATE", s, D, "VQUANT", "fp16") == b"OK"
    assert r.execute_command("V.CREATE", s, D, "VQUANT", "fp16") == b"OK"
    assert "exists" in err(r, "V.CREATE", s, D, "VQUANT", "fp32")
    assert "exists" in err(r, "V.CREATE", s, 32, "VQUANT", "fp16")


def test_group_format_with_bad_dim_is_refused_with_the_codec_wording(r: redis.Redis) -> None:
    s = sid()
    assert err(r, "V.CREATE", s, 48, "VQUANT", "fp8") == "kv_dim must be a multiple of 32 for fp8"
    assert r.execute_command("V.LIST", s) == []


def test_schema_session_stores_each_layer_in_its_format(r: redis.Redis) -> None:
    s, data = sid(), rows(4)
    assert r.execute_command("V.CREATE", s, D, "SCHEMA", 3, "fp16", "fp8", "fp16") == b"OK"
    for layer in range(3):
        assert r.execute_command("V.STOREBATCH", s, layer, 0, data.tobytes()) == 4
    assert len(r.execute_command("V.FETCH", s, 1, "RANGE", 0, 4, "DTYPE", "raw")) == 4 * 68
    assert len(r.execute_command("V.FETCH", s, 2, "RANGE", 0, 4, "DTYPE", "raw")) == 4 * 2 * D
    assert "out of range" in err(r, "V.STOREBATCH", s, 3, 0, data.tobytes())
    meta = info(r, s)
    assert meta["format"] == b"schema"
    assert meta["schema"] == [b"fp16", b"fp8", b"fp16"]
    assert meta["rows"] == [4, 4, 4]


def test_partial_row_blob_is_refused_and_nothing_is_stored(r: redis.Redis) -> None:
    s = sid()
    r.execute_command("V.CREATE", s, D)
    r.execute_command("V.STOREBATCH", s, 0, 0, rows(2).tobytes())
    assert "whole number" in err(r, "V.STOREBATCH", s, 0, 2, rows(3).tobytes()[:-4])
    assert "whole number" in err(r, "V.STOREBATCH", s, 0, 2, b"")
    assert info(r, s)["rows"] == [2]


def test_gap_is_refused_and_overwrite_is_allowed(r: redis.Redis) -> None:
    s = sid()
    r.execute_command("V.CREATE", s, D)
    r.execute_command("V.STOREBATCH", s, 0, 0, rows(3).tobytes())
    assert "gap" in err(r, "V.STOREBATCH", s, 0, 4, rows(1).tobytes())
    assert r.execute_command("V.STOREBATCH", s, 0, 1, rows(4, seed=9).tobytes()) == 5
    assert r.execute_command("V.FETCH", s, 0, "RANGE", 1, 5) == rows(4, seed=9).tobytes()


def test_nan_is_refused_by_a_quantized_format_and_nothing_is_stored(r: redis.Redis) -> None:
    s, data = sid(), rows(3)
    data[1, 5] = np.nan
    r.execute_command("V.CREATE", s, D, "VQUANT", "int8")
    assert "NaN" in err(r, "V.STOREBATCH", s, 0, 0, data.tobytes())
    assert info(r, s)["rows"] == []


def test_fetch_outside_the_stored_rows_is_refused(r: redis.Redis) -> None:
    s = sid()
    r.execute_command("V.CREATE", s, D)
    r.execute_command("V.STOREBATCH", s, 0, 0, rows(3).tobytes())
    assert "outside" in err(r, "V.FETCH", s, 0, "RANGE", 0, 4)
    assert "outside" in err(r, "V.FETCH", s, 0, "RANGE", 2, 1)
    assert "outside" in err(r, "V.FETCH", s, 0, 3)
    assert "not found" in err(r, "V.FETCH", sid("missing"), 0, "RANGE", 0, 1)


def test_legacy_id_list_returns_rows_in_the_order_asked(r: redis.Redis) -> None:
    s, data = sid(), rows(5)
    r.execute_command("V.CREATE", s, D, "VQUANT", "fp16")
    r.execute_command("V.STOREBATCH", s, 0, 0, data.tobytes())
    want = data.astype("<f2")[[4, 0, 4]]
    assert r.execute_command("V.FETCH", s, 0, 4, 0, 4, "DTYPE", "f16") == want.tobytes()
    assert r.execute_command("V.FETCH", s, 0, 4, 0, 4) == want.astype("<f4").tobytes()


def test_mfetch_of_thirty_layers_equals_thirty_fetches(r: redis.Redis) -> None:
    s = sid()
    r.execute_command("V.CREATE", s, D, "VQUANT", "fp16")
    pipe = r.pipeline(transaction=False)
    for layer in range(30):
        pipe.execute_command("V.STOREBATCH", s, layer, 0, rows(16, seed=layer).tobytes())
    assert pipe.execute() == [16] * 30
    reply = r.execute_command("V.MFETCH", s, 0, 30, "RANGE", 2, 12, "DTYPE", "f16")
    assert len(reply) == 30
    assert reply == [r.execute_command("V.FETCH", s, layer, "RANGE", 2, 12, "DTYPE", "f16") for layer in range(30)]
    assert reply[7] == rows(16, seed=7)[2:12].astype("<f2").tobytes()
    assert "outside" in err(r, "V.MFETCH", s, 0, 31, "RANGE", 0, 1)


def test_fetch_payload_bytes_count_into_the_receipt(r: redis.Redis) -> None:
    s = sid()
    r.execute_command("V.CREATE", s, D, "VQUANT", "fp16")
    r.execute_command("V.STOREBATCH", s, 0, 0, rows(4).tobytes())
    r.execute_command("V.STOREBATCH", s, 1, 0, rows(4).tobytes())
    before = stats(r)["kvprefix_bytes_served"]
    r.execute_command("V.FETCH", s, 0, "RANGE", 0, 4)
    r.execute_command("V.MFETCH", s, 0, 2, "RANGE", 0, 4, "DTYPE", "f16")
    assert stats(r)["kvprefix_bytes_served"] == before + 4 * D * 4 + 2 * 4 * D * 2


def test_info_describes_the_session(r: redis.Redis) -> None:
    s = sid()
    r.execute_command("V.CREATE", s, D, "VQUANT", "fp16")
    r.execute_command("V.STOREBATCH", s, 1, 0, rows(3).tobytes())
    meta = info(r, s)
    assert (meta["kv_dim"], meta["format"], meta["tokens"], meta["rows"], meta["bytes"]) == (
        D, b"fp16", 0, [0, 3], 3 * D * 2)
    assert "not found" in err(r, "V.INFO", sid("missing"))


def test_list_filters_by_pattern_and_drop_counts_what_it_removed(r: redis.Redis) -> None:
    tag = sid("lst")
    names = [f"{tag}:{i}" for i in range(3)]
    for name in names:
        r.execute_command("V.CREATE", name, D)
    assert r.execute_command("V.LIST", f"{tag}:*") == [n.encode() for n in names]
    assert r.execute_command("V.DROP", names[0], names[1], "nope") == 2
    assert r.execute_command("V.LIST", f"{tag}:*") == [names[2].encode()]


@pytest.mark.parametrize("args, wording", [
    (("V.CREATE", "x"), "wrong number of arguments for 'v.create' command"),
    (("V.CREATE", "x", "abc"), "not an integer"),
    (("V.CREATE", "x", "-4"), "kv_dim must be"),
    (("V.CREATE", "x", "0"), "kv_dim must be"),
    (("V.CREATE", "x", "64", "VQUANT"), "VQUANT needs 1 value"),
    (("V.CREATE", "x", "64", "VQUANT", "fp99"), "unknown format 'fp99'"),
    (("V.CREATE", "x", "64", "SCHEMA", "2", "fp16"), "SCHEMA needs 2 values"),
    (("V.CREATE", "x", "64", "COLOUR", "red"), "syntax error near 'COLOUR'"),
    (("V.CREATE", "x", "64", "VQUANT", "fp16", "SCHEMA", "1", "fp16"), "mutually exclusive"),
    (("V.STOREBATCH", "x", "0", "0"), "wrong number of arguments for 'v.storebatch' command"),
    (("V.STOREBATCH", "x", "-1", "0", "blob"), "layer must be"),
    (("V.STOREBATCH", "x", "0", "1.5", "blob"), "not an integer"),
    (("V.STOREBATCH", "x", "0", "0", "blob", "DTYPE", "bf16"), "unknown DTYPE 'bf16'"),
    (("V.STOREBATCH", "x", "0", "0", "blob", "DTYPE"), "DTYPE needs 1 value"),
    (("V.FETCH", "x", "0"), "wrong number of arguments for 'v.fetch' command"),
    (("V.FETCH", "x", "0", "RANGE", "0"), "RANGE needs 2 values"),
    (("V.FETCH", "x", "0", "RANGE", "0", "1", "DTYPE", "f64"), "unknown DTYPE"),
    (("V.FETCH", "x", "0", "RANGE", "0", "1", "EXTRA"), "syntax error"),
    (("V.MFETCH", "x", "0", "1", "RANGE", "0"), "wrong number of arguments for 'v.mfetch' command"),
    (("V.MFETCH", "x", "0", "1", "SPAN", "0", "1"), "syntax error near 'SPAN'"),
    (("V.INFO",), "wrong number of arguments for 'v.info' command"),
    (("V.DROP",), "wrong number of arguments for 'v.drop' command"),
    (("V.LIST", "a", "b"), "syntax error"),
])
def test_bad_input_is_refused_with_a_reason(r: redis.Redis, args: tuple[str, ...], wording: str) -> None:
    assert wording in err(r, *args)
    assert r.execute_command("V.LIST", "x") == []
    assert r.ping() is True


def snapshot(r: redis.Redis, reads_since: int = 0) -> tuple[object, ...]:
    """Everything a rejected command must leave alone (uptime excluded).

    Reading the held rows is itself a counted fetch; ``reads_since`` such reads
    happened after the snapshot being compared against, and are discounted.
    """
    counters = {k: v for k, v in stats(r).items() if k != "uptime_seconds"}
    info = r.execute_command("KV.PREFIX.INFO")
    held = r.execute_command("V.FETCH", "fuzz-held_pk", 0, "RANGE", 0, 2, "DTYPE", "raw")
    counters["kvprefix_bytes_served"] -= reads_since * len(held)  # type: ignore[operator]
    fetches = int(info.split(b"vstore_total_fetches:")[1].split(b"\r\n")[0]) - reads_since
    return r.execute_command("V.LIST"), counters, fetches, info.split(b"vstore_total_fetches")[0], held


WORDS = [b"RANGE", b"DTYPE", b"f16", b"raw", b"0", b"1", b"2", b"-1", b"64", b"VQUANT", b"SCHEMA", b"fp8",
         b"int8", b"BLOCKS", b"LAYERS", b"TOKENS", b"PREFILL_MS", b"RESET", b"fuzz-held", b"fuzz-held_pk",
         b"99999999999999999999", b"\x00" * 8]
STORE_COMMANDS = ["V.CREATE", "V.STOREBATCH", "V.FETCH", "V.MFETCH", "V.INFO", "V.LIST",
                  "KV.PREFIX.REGISTER", "KV.PREFIX.REGISTER.SCHEMA", "KV.PREFIX.LOOKUP", "KV.PREFIX.BLOCKS",
                  "KV.PREFIX.MEMBERSHIP", "KV.PREFIX.INFO", "PION.STATS"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(STORE_COMMANDS),
       args=st.lists(st.one_of(st.sampled_from(WORDS), st.binary(max_size=12)), max_size=8))
def test_random_arguments_that_are_refused_change_nothing(
        shared_pion_server: ServerProcess, command: str, args: list[bytes]) -> None:
    with shared_pion_server.client() as r:
        r.execute_command("KV.PREFIX.REGISTER", "fuzz-held", D, "fp16", "BLOCKS", 16, 1, b"\x07" * 8)
        if r.execute_command("V.INFO", "fuzz-held_pk")[11] == 0:
            r.execute_command("V.STOREBATCH", "fuzz-held_pk", 0, 0, rows(2).tobytes())
        before = snapshot(r)
        try:
            r.execute_command(command, *args)
        except redis.ResponseError:
            assert snapshot(r, reads_since=1) == before
        assert r.ping() is True
