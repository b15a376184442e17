"""The 7-bit V formats (issue 20) through a real pion-server: K kivi5g64 + V int7h64 registers with
KV.PREFIX.REGISTER.SCHEMA and restores what the codecs decode; any range of int7h128 fetches."""

from __future__ import annotations

import pytest
import redis
from support.codec_rows import CodecRows

from pion.codecs import get_codec

KV_DIM = 128
ROWS = CodecRows(KV_DIM)
rows, decoded, fetch_f32 = ROWS.rows, ROWS.decoded, ROWS.fetch_f32


def test_the_7_bit_v_pair_registers_through_schema_and_restores_what_the_codecs_decode(conn: redis.Redis) -> None:
    k_data, v_data = rows(150, 11), rows(150, 12)
    assert conn.execute_command("KV.PREFIX.REGISTER.SCHEMA", "seven", KV_DIM, 2, "kivi5g64", "kivi4g128",
                                "int7h64", "int7h128") == b"OK"
    for layer in range(2):
        conn.execute_command("V.STOREBATCH", "seven_pk", layer, 0, k_data.tobytes())
        conn.execute_command("V.STOREBATCH", "seven_pv", layer, 0, v_data.tobytes())
    assert conn.execute_command("KV.PREFIX.LOOKUP", "seven") == b"HIT"
    assert fetch_f32(conn, "seven_pk", 0, 0, 150).tolist() == decoded("kivi5g64", k_data).tolist()
    assert fetch_f32(conn, "seven_pk", 1, 0, 150).tolist() == decoded("kivi4g128", k_data).tolist()
    assert fetch_f32(conn, "seven_pv", 0, 0, 150).tolist() == decoded("int7h64", v_data).tolist()
    assert conn.execute_command("V.FETCH", "seven_pv", 1, "RANGE", 0, 150, "DTYPE", "raw") == \
        get_codec("int7h128").encode(v_data)


def test_int7h128_stores_and_fetches_any_range_row_by_row(conn: redis.Redis) -> None:
    data = rows(40, 13)
    conn.execute_command("V.CREATE", "i7", KV_DIM, "VQUANT", "int7h128")
    assert conn.execute_command("V.STOREBATCH", "i7", 0, 0, data[:17].tobytes()) == 17
    assert conn.execute_command("V.STOREBATCH", "i7", 0, 17, data[17:].tobytes()) == 40
    assert fetch_f32(conn, "i7", 0, 5, 33).tolist() == decoded("int7h128", data)[5:33].tolist()


def test_a_dim_int7h128_cannot_split_is_refused_and_creates_nothing(conn: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.CREATE", "bad7", 64, "VQUANT", "int7h128")
    assert str(info.value) == "kv_dim must be a multiple of 128 for int7h128"
    assert conn.execute_command("EXISTS", "bad7") == 0
