"""Every storage format end to end through a real pion-server, with redis-py as the client."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from pion.codecs import get_codec

QUANTIZED = ["int8", "fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"]
KV_DIM = 192


def rows(n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, KV_DIM)) * 1.5).astype(np.float32)


@pytest.mark.parametrize("name", ["fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"])
def test_create_with_a_dim_that_is_not_a_multiple_of_32_is_refused_by_name(conn: redis.Redis, name: str) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.CREATE", f"dim100_{name}", 100, "VQUANT", name)
    assert str(info.value) == f"kv_dim must be a multiple of 32 for {name}"
    with pytest.raises(redis.ResponseError) as fetch:
        conn.execute_command("V.FETCH", f"dim100_{name}", 0, "RANGE", 0, 1)
    assert str(fetch.value) == f"session 'dim100_{name}' not found"


@pytest.mark.parametrize("name", ["int8", "fp16", "fp32"])
def test_row_formats_accept_a_dim_of_100(conn: redis.Redis, name: str) -> None:
    assert conn.execute_command("V.CREATE", f"dim100ok_{name}", 100, "VQUANT", name) == b"OK"


@pytest.mark.parametrize("name", QUANTIZED)
def test_a_batch_with_nan_is_refused_and_nothing_is_stored(conn: redis.Redis, name: str) -> None:
    sid = f"nan_{name}"
    assert conn.execute_command("V.CREATE", sid, KV_DIM, "VQUANT", name) == b"OK"
    good = rows(4, 1)
    assert conn.execute_command("V.STOREBATCH", sid, 0, 0, good.tobytes()) == 4
    bad = rows(3, 2)
    bad[2, 7] = np.nan
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.STOREBATCH", sid, 0, 4, bad.tobytes())
    assert str(info.value) == f"{name} cannot store NaN or Inf (found in row 2); nothing was stored"
    with pytest.raises(redis.ResponseError, match="outside the 4 rows of layer 0"):
        conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 5)
    stored = conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 4, "DTYPE", "raw")
    assert stored == get_codec(name).encode(good)


@pytest.mark.parametrize("name", ["int8", "turbo3", "mlx4g32"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_a_batch_with_inf_is_refused_and_nothing_is_stored(conn: redis.Redis, name: str, bad: float) -> None:
    sid = f"inf_{name}_{bad}"
    assert conn.execute_command("V.CREATE", sid, KV_DIM, "VQUANT", name) == b"OK"
    good = rows(1, 5)
    assert conn.execute_command("V.STOREBATCH", sid, 0, 0, good.tobytes()) == 1
    data = rows(2, 6)
    data[0, 3] = bad
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.STOREBATCH", sid, 0, 1, data.tobytes())
    assert str(info.value) == f"{name} cannot store NaN or Inf (found in row 0); nothing was stored"
    with pytest.raises(redis.ResponseError, match="outside the 1 rows of layer 0"):
        conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 2)
    assert conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 1, "DTYPE", "raw") == get_codec(name).encode(good)


@pytest.mark.parametrize("name", ["fp32", "fp16"])
def test_fp32_and_fp16_store_nan_and_inf_faithfully_through_the_server(conn: redis.Redis, name: str) -> None:
    sid = f"naninf_{name}"
    data = rows(1, 6)
    data[0, :4] = [np.nan, np.inf, -np.inf, 1e6]
    assert conn.execute_command("V.CREATE", sid, KV_DIM, "VQUANT", name) == b"OK"
    assert conn.execute_command("V.STOREBATCH", sid, 0, 0, data.tobytes()) == 1
    back = np.frombuffer(conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 1), dtype="<f4")
    big = 1e6 if name == "fp32" else 65504.0  # fp16 saturates finite values
    assert (bool(np.isnan(back[0])), back[1:4].tolist()) == (True, [np.inf, -np.inf, big])


@pytest.mark.parametrize("name", ["fp32", "fp16", *QUANTIZED])
def test_each_format_round_trips_through_the_server(conn: redis.Redis, name: str) -> None:
    sid = f"rt_{name}"
    codec = get_codec(name)
    data = rows(64, 3)
    assert conn.execute_command("V.CREATE", sid, KV_DIM, "VQUANT", name) == b"OK"
    assert conn.execute_command("V.STOREBATCH", sid, 0, 0, data.tobytes()) == 64
    raw = conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 64, "DTYPE", "raw")
    assert raw == codec.encode(data)
    fetched = np.frombuffer(conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 64), dtype="<f4")
    assert fetched.tolist() == codec.decode(raw, KV_DIM).reshape(-1).tolist()
    half = np.frombuffer(conn.execute_command("V.FETCH", sid, 0, "RANGE", 10, 20, "DTYPE", "f16"), dtype="<f2")
    assert half.tolist() == codec.decode(raw, KV_DIM)[10:20].astype(np.float16).reshape(-1).tolist()


@pytest.mark.parametrize("name", QUANTIZED)
def test_rows_stored_raw_are_returned_raw_and_decoded_by_the_server(conn: redis.Redis, name: str) -> None:
    sid = f"raw_{name}"
    codec = get_codec(name)
    blob = codec.encode(rows(16, 4))
    assert conn.execute_command("V.CREATE", sid, KV_DIM, "VQUANT", name) == b"OK"
    assert conn.execute_command("V.STOREBATCH", sid, 0, 0, blob, "DTYPE", "raw") == 16
    assert conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 16, "DTYPE", "raw") == blob
    fetched = np.frombuffer(conn.execute_command("V.FETCH", sid, 0, "RANGE", 0, 16), dtype="<f4")
    assert fetched.tolist() == codec.decode(blob, KV_DIM).reshape(-1).tolist()


@pytest.mark.parametrize("name", ["fp8", "turbo2", "mlx4g32"])
def test_prefix_register_with_a_dim_that_is_not_a_multiple_of_32_is_refused_by_name(
        conn: redis.Redis, name: str) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("KV.PREFIX.REGISTER", f"app|{name}|dim100", 100, name)
    assert str(info.value) == f"kv_dim must be a multiple of 32 for {name}"
    assert conn.execute_command("KV.PREFIX.LOOKUP", f"app|{name}|dim100") == b"MISS"
