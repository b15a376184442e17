"""The first-row-in-fp16 formats (issue 20) through a real pion-server: the <= 40% pair K kivi6g128s +
V int6h64s128 registers with KV.PREFIX.REGISTER.SCHEMA and restores what the codecs decode, a range
fetch decodes from its 128-token group, a write that splits a group is refused, and the rows come
back byte for byte after a restart (WAL replay, then a snapshot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import redis
from support.codec_rows import CodecRows
from support.procs import start_server

from pion.codecs import get_codec

KV_DIM = 128
ROWS = CodecRows(KV_DIM, sink=8.0)
rows, decoded, fetch_f32 = ROWS.rows, ROWS.decoded, ROWS.fetch_f32


def test_the_sink_pair_registers_through_schema_and_restores_what_the_codecs_decode(conn: redis.Redis) -> None:
    k_data, v_data = rows(300, 21), rows(300, 22)
    assert conn.execute_command("KV.PREFIX.REGISTER.SCHEMA", "sinks", KV_DIM, 2, "kivi6g128s", "fp16",
                                "int6h64s128", "int7h128s128") == b"OK"
    for layer in range(2):
        conn.execute_command("V.STOREBATCH", "sinks_pk", layer, 0, k_data.tobytes())
        conn.execute_command("V.STOREBATCH", "sinks_pv", layer, 0, v_data.tobytes())
    assert conn.execute_command("KV.PREFIX.LOOKUP", "sinks") == b"HIT"
    assert fetch_f32(conn, "sinks_pk", 0, 0, 300).tolist() == decoded("kivi6g128s", k_data).tolist()
    assert fetch_f32(conn, "sinks_pk", 0, 0, 1).tolist() == [[8.0] * KV_DIM]  # the sink, exact
    assert fetch_f32(conn, "sinks_pv", 0, 130, 290).tolist() == decoded("int6h64s128", v_data)[130:290].tolist()
    assert conn.execute_command("V.FETCH", "sinks_pv", 1, "RANGE", 0, 300, "DTYPE", "raw") == \
        get_codec("int7h128s128").encode(v_data)


def test_a_write_that_splits_a_128_token_group_is_refused_and_keeps_what_was_stored(conn: redis.Redis) -> None:
    data = rows(140, 23)
    conn.execute_command("V.CREATE", "s6", KV_DIM, "VQUANT", "int6h64s128")
    assert conn.execute_command("V.STOREBATCH", "s6", 0, 0, data.tobytes()) == 140
    before = conn.execute_command("V.FETCH", "s6", 0, "RANGE", 0, 140, "DTYPE", "raw")
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.STOREBATCH", "s6", 0, 64, rows(10, 24).tobytes())
    assert str(info.value) == (
        "int6h64s128 stores rows in groups of 128 tokens: a batch must start at a multiple of 128 and end at one "
        "or at/after the layer's end (140 rows), and one that rewrites the group before a partial tail must "
        "rewrite the tail too; got rows 64..74")
    assert conn.execute_command("V.FETCH", "s6", 0, "RANGE", 0, 140, "DTYPE", "raw") == before
    assert fetch_f32(conn, "s6", 0, 120, 140).tolist() == decoded("int6h64s128", data)[120:140].tolist()


def test_a_dim_the_sink_formats_cannot_split_is_refused(conn: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.CREATE", "bad_s", 64, "VQUANT", "int7h128s128")
    assert str(info.value) == "kv_dim must be a multiple of 128 for int7h128s128"


def test_sink_rows_extended_past_a_group_survive_a_restart_through_the_wal_and_a_snapshot(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    data = rows(300, 25)
    try:
        r = server.client()
        r.execute_command("V.CREATE", "sp", KV_DIM, "VQUANT", "int7h64s128")
        r.execute_command("V.STOREBATCH", "sp", 0, 0, data[:200].tobytes())
        r.execute_command("V.STOREBATCH", "sp", 0, 128, data[128:].tobytes())  # the tail's group re-sent, filled
        expected = r.execute_command("V.FETCH", "sp", 0, "RANGE", 0, 300, "DTYPE", "raw")
        assert expected == get_codec("int7h64s128").encode(data)
        server.stop()
        server = start_server(tmp_path / "data", port=server.port)  # WAL replay
        r = server.client()
        assert r.execute_command("V.FETCH", "sp", 0, "RANGE", 0, 300, "DTYPE", "raw") == expected
        assert r.execute_command("SAVE") is True
        server.stop()
        server = start_server(tmp_path / "data", port=server.port)  # snapshot load
        r = server.client()
        assert fetch_f32(r, "sp", 0, 128, 129).tolist() == [data[128].astype(np.float16).astype(np.float32).tolist()]
        assert r.execute_command("V.FETCH", "sp", 0, "RANGE", 0, 300, "DTYPE", "raw") == expected
    finally:
        server.stop()


def test_the_rotated_v_sink_pair_registers_through_schema_and_restores_what_the_codecs_decode(
        conn: redis.Redis) -> None:
    k_data, v_data = rows(200, 26), rows(200, 27)
    assert conn.execute_command("KV.PREFIX.REGISTER.SCHEMA", "rot", KV_DIM, 1, "kivi6g128s", "int6h64rs128") == b"OK"
    conn.execute_command("V.STOREBATCH", "rot_pk", 0, 0, k_data.tobytes())
    conn.execute_command("V.STOREBATCH", "rot_pv", 0, 0, v_data.tobytes())
    assert conn.execute_command("KV.PREFIX.LOOKUP", "rot") == b"HIT"
    assert fetch_f32(conn, "rot_pv", 0, 0, 200).tolist() == decoded("int6h64rs128", v_data).tolist()
    assert fetch_f32(conn, "rot_pv", 0, 0, 1).tolist() == [[8.0] * KV_DIM]
