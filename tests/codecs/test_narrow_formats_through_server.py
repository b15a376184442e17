"""The 5- and 6-bit formats (issue 20) through a real pion-server: the <= 40% pair registers with
KV.PREFIX.REGISTER.SCHEMA, the kivi6 token-group rules hold, any range of int6h64 fetches."""

from __future__ import annotations

import numpy as np
import pytest
import redis
from support.codec_rows import CodecRows

from pion.codecs import get_codec

KV_DIM = 128
ROWS = CodecRows(KV_DIM)
rows, decoded, fetch_f32 = ROWS.rows, ROWS.decoded, ROWS.fetch_f32


def test_the_6_bit_pair_registers_through_schema_and_restores_what_the_codecs_decode(conn: redis.Redis) -> None:
    k_data, v_data = rows(150, 1), rows(150, 2)
    assert conn.execute_command("KV.PREFIX.REGISTER.SCHEMA", "six", KV_DIM, 2, "kivi6g128", "fp16",
                                "int6h64", "int5h64") == b"OK"
    for layer in range(2):
        conn.execute_command("V.STOREBATCH", "six_pk", layer, 0, k_data.tobytes())
        conn.execute_command("V.STOREBATCH", "six_pv", layer, 0, v_data.tobytes())
    assert conn.execute_command("KV.PREFIX.LOOKUP", "six") == b"HIT"
    assert fetch_f32(conn, "six_pk", 0, 0, 150).tolist() == decoded("kivi6g128", k_data).tolist()
    assert fetch_f32(conn, "six_pk", 1, 0, 150).tolist() == k_data.astype(np.float16).astype(np.float32).tolist()
    assert fetch_f32(conn, "six_pv", 0, 7, 99).tolist() == decoded("int6h64", v_data)[7:99].tolist()
    assert conn.execute_command("V.FETCH", "six_pv", 1, "RANGE", 0, 150, "DTYPE", "raw") == \
        get_codec("int5h64").encode(v_data)


def test_kivi6_refuses_a_batch_that_splits_its_token_group_and_keeps_what_was_stored(conn: redis.Redis) -> None:
    data = rows(70, 3)
    conn.execute_command("V.CREATE", "k6", KV_DIM, "VQUANT", "kivi6g64")
    assert conn.execute_command("V.STOREBATCH", "k6", 0, 0, data.tobytes()) == 70
    before = conn.execute_command("V.FETCH", "k6", 0, "RANGE", 0, 70, "DTYPE", "raw")
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.STOREBATCH", "k6", 0, 8, rows(10, 4).tobytes())
    assert str(info.value) == (
        "kivi6g64 stores rows in groups of 64 tokens: a batch must start at a multiple of 64 and end at one "
        "or at/after the layer's end (70 rows), and one that rewrites the group before a partial tail must "
        "rewrite the tail too; got rows 8..18")
    assert conn.execute_command("V.FETCH", "k6", 0, "RANGE", 0, 70, "DTYPE", "raw") == before
    assert fetch_f32(conn, "k6", 0, 60, 70).tolist() == decoded("kivi6g64", data)[60:70].tolist()


@pytest.mark.parametrize("name,dim,multiple", [("int6h128", 64, 128), ("kivi5g128", 96, 64)])
def test_a_dim_the_narrow_formats_cannot_split_is_refused(conn: redis.Redis, name: str, dim: int,
                                                          multiple: int) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.CREATE", f"bad6_{name}", dim, "VQUANT", name)
    assert str(info.value) == f"kv_dim must be a multiple of {multiple} for {name}"
