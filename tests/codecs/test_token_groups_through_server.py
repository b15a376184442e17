"""The kivi formats (rows encoded in token groups) and the per-head formats through a real pion-server.

V.STOREBATCH must start on a token group and end on one or at/after the layer's end; reads of any
range decode the enclosing groups, so every V.FETCH / V.MFETCH answer equals decoding the whole
stored blob and slicing it. Restarts (WAL replay and snapshots) give back the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import redis
from support.codec_rows import CodecRows
from support.procs import start_server

from pion.codecs import get_codec

KV_DIM = 64
ROWS = CodecRows(KV_DIM, outlier="scale")
rows, decoded, fetch_f32 = ROWS.rows, ROWS.decoded, ROWS.fetch_f32


def test_a_range_fetch_equals_decoding_the_whole_blob_and_slicing(conn: redis.Redis) -> None:
    data = rows(70, 1)  # kivi4g32: two full groups and a 6-row tail
    assert conn.execute_command("V.CREATE", "kr", KV_DIM, "VQUANT", "kivi4g32") == b"OK"
    assert conn.execute_command("V.STOREBATCH", "kr", 0, 0, data.tobytes()) == 70
    whole = decoded("kivi4g32", data)
    for a, b in [(0, 70), (5, 35), (31, 33), (40, 41), (64, 70), (66, 68), (10, 10)]:
        assert fetch_f32(conn, "kr", 0, a, b).tolist() == whole[a:b].tolist()
    half = conn.execute_command("V.FETCH", "kr", 0, "RANGE", 3, 40, "DTYPE", "f16")
    assert np.frombuffer(half, dtype="<f2").reshape(-1, KV_DIM).tolist() == whole[3:40].astype(np.float16).tolist()
    raw = conn.execute_command("V.FETCH", "kr", 0, "RANGE", 0, 70, "DTYPE", "raw")
    assert raw == get_codec("kivi4g32").encode(data)
    row = get_codec("kivi4g32").row_bytes(KV_DIM)
    assert conn.execute_command("V.FETCH", "kr", 0, "RANGE", 32, 40, "DTYPE", "raw") == raw[32 * row:40 * row]


def test_fetch_by_token_ids_decodes_their_groups(conn: redis.Redis) -> None:
    data = rows(100, 2)
    conn.execute_command("V.CREATE", "kid", KV_DIM, "VQUANT", "kivi8g64")
    conn.execute_command("V.STOREBATCH", "kid", 0, 0, data.tobytes())
    whole = decoded("kivi8g64", data)
    blob = conn.execute_command("V.FETCH", "kid", 0, 70, 3, 99, 63)
    assert np.frombuffer(blob, dtype="<f4").reshape(-1, KV_DIM).tolist() == whole[[70, 3, 99, 63]].tolist()


def test_mfetch_decodes_every_layer_of_a_range(conn: redis.Redis) -> None:
    conn.execute_command("V.CREATE", "km", KV_DIM, "VQUANT", "kivi4g64")
    layers = [rows(80, 10 + layer) for layer in range(3)]
    for layer, data in enumerate(layers):
        conn.execute_command("V.STOREBATCH", "km", layer, 0, data.tobytes())
    replies = conn.execute_command("V.MFETCH", "km", 0, 3, "RANGE", 50, 75)
    got = [np.frombuffer(r, dtype="<f4").reshape(-1, KV_DIM).tolist() for r in replies]
    assert got == [decoded("kivi4g64", data)[50:75].tolist() for data in layers]


def test_a_batch_that_splits_a_token_group_is_refused_and_nothing_is_stored(conn: redis.Redis) -> None:
    data = rows(70, 3)
    conn.execute_command("V.CREATE", "ks", KV_DIM, "VQUANT", "kivi4g32")
    conn.execute_command("V.STOREBATCH", "ks", 0, 0, data.tobytes())
    before = conn.execute_command("V.FETCH", "ks", 0, "RANGE", 0, 70, "DTYPE", "raw")
    # (32, 32) would rewrite only the group the 6 tail rows are stored relative to
    for start, n in [(8, 10), (65, 5), (0, 40), (32, 20), (32, 32), (0, 64)]:
        with pytest.raises(redis.ResponseError) as info:
            conn.execute_command("V.STOREBATCH", "ks", 0, start, rows(n, 4).tobytes())
        assert str(info.value) == (
            "kivi4g32 stores rows in groups of 32 tokens: a batch must start at a multiple of 32 and end at one "
            "or at/after the layer's end (70 rows), and one that rewrites the group before a partial tail must "
            f"rewrite the tail too; got rows {start}..{start + n}")
    assert conn.execute_command("V.FETCH", "ks", 0, "RANGE", 0, 70, "DTYPE", "raw") == before
    info_reply = conn.execute_command("V.INFO", "ks")
    assert info_reply[info_reply.index(b"rows") + 1] == [70]


def test_a_partial_tail_is_extended_by_resending_its_group(conn: redis.Redis) -> None:
    data = rows(100, 5)
    conn.execute_command("V.CREATE", "kt", KV_DIM, "VQUANT", "kivi4g32")
    assert conn.execute_command("V.STOREBATCH", "kt", 0, 0, data[:40].tobytes()) == 40
    # rows 32..39 are a per-token tail; re-sending them with the next rows makes them a full group
    assert conn.execute_command("V.STOREBATCH", "kt", 0, 32, data[32:100].tobytes()) == 100
    raw = conn.execute_command("V.FETCH", "kt", 0, "RANGE", 0, 100, "DTYPE", "raw")
    assert raw == get_codec("kivi4g32").encode(data)
    # a whole-group overwrite in the middle is allowed too
    new = rows(32, 6)
    assert conn.execute_command("V.STOREBATCH", "kt", 0, 32, new.tobytes()) == 100
    expected = np.concatenate([data[:32], new, data[64:]])
    assert fetch_f32(conn, "kt", 0, 0, 100).tolist() == decoded("kivi4g32", expected).tolist()


def test_raw_rows_stored_by_a_client_are_kept_as_sent(conn: redis.Redis) -> None:
    data = rows(45, 7)
    blob = get_codec("kivi4g128").encode(data)
    conn.execute_command("V.CREATE", "kraw", KV_DIM, "VQUANT", "kivi4g128")
    assert conn.execute_command("V.STOREBATCH", "kraw", 0, 0, blob, "DTYPE", "raw") == 45
    assert fetch_f32(conn, "kraw", 0, 0, 45).tolist() == decoded("kivi4g128", data).tolist()


def test_the_kivi_pair_registers_through_schema_and_restores(conn: redis.Redis) -> None:
    k_data, v_data = rows(50, 8), rows(50, 9)
    assert conn.execute_command("KV.PREFIX.REGISTER.SCHEMA", "pair", KV_DIM, 2, "fp16", "kivi4g64",
                                "fp16", "mlx4g32") == b"OK"
    for layer in range(2):
        conn.execute_command("V.STOREBATCH", "pair_pk", layer, 0, k_data.astype(np.float16).tobytes(),
                             "DTYPE", "f16")
        conn.execute_command("V.STOREBATCH", "pair_pv", layer, 0, v_data.astype(np.float16).tobytes(),
                             "DTYPE", "f16")
    assert conn.execute_command("KV.PREFIX.LOOKUP", "pair") == b"HIT"
    k_half = k_data.astype(np.float16).astype(np.float32)
    k1 = conn.execute_command("V.FETCH", "pair_pk", 1, "RANGE", 0, 50, "DTYPE", "raw")
    assert get_codec("kivi4g64").decode(k1, KV_DIM).tolist() == decoded("kivi4g64", k_half).tolist()
    v1 = conn.execute_command("V.FETCH", "pair_pv", 1, "RANGE", 0, 50, "DTYPE", "raw")
    assert v1 == get_codec("mlx4g32").encode(v_data.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("name,dim,multiple", [("int8h128", 64, 128), ("kivi4g128", 96, 64), ("kivi8g32", 48, 32)])
def test_create_with_a_dim_the_groups_do_not_divide_is_refused(conn: redis.Redis, name: str, dim: int,
                                                               multiple: int) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("V.CREATE", f"bad_{name}", dim, "VQUANT", name)
    assert str(info.value) == f"kv_dim must be a multiple of {multiple} for {name}"
    with pytest.raises(redis.ResponseError) as schema:
        conn.execute_command("KV.PREFIX.REGISTER.SCHEMA", f"badns_{name}", dim, 1, name, "fp16")
    assert str(schema.value) == f"kv_dim must be a multiple of {multiple} for {name}"


@pytest.mark.parametrize("name", ["int8h64", "fp8h64"])
def test_per_head_formats_store_and_fetch_any_range(conn: redis.Redis, name: str) -> None:
    data = rows(9, 11)
    conn.execute_command("V.CREATE", f"ph_{name}", KV_DIM, "VQUANT", name)
    assert conn.execute_command("V.STOREBATCH", f"ph_{name}", 0, 0, data[:5].tobytes()) == 5
    assert conn.execute_command("V.STOREBATCH", f"ph_{name}", 0, 3, data[3:].tobytes()) == 9
    assert fetch_f32(conn, f"ph_{name}", 0, 2, 7).tolist() == decoded(name, data)[2:7].tolist()


def test_token_grouped_rows_survive_a_restart_through_the_wal_and_a_snapshot(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    data = rows(100, 12)
    try:
        r = server.client()
        r.execute_command("V.CREATE", "kp", KV_DIM, "VQUANT", "kivi4g32")
        r.execute_command("V.STOREBATCH", "kp", 0, 0, data[:40].tobytes())
        r.execute_command("V.STOREBATCH", "kp", 0, 32, data[32:].tobytes())
        expected = r.execute_command("V.FETCH", "kp", 0, "RANGE", 0, 100, "DTYPE", "raw")
        server.stop()
        server = start_server(tmp_path / "data", port=server.port)  # WAL replay
        r = server.client()
        assert r.execute_command("V.FETCH", "kp", 0, "RANGE", 0, 100, "DTYPE", "raw") == expected
        assert r.execute_command("SAVE") is True  # redis-py reads +OK as True for SAVE
        server.stop()
        server = start_server(tmp_path / "data", port=server.port)  # snapshot load
        r = server.client()
        assert r.execute_command("V.FETCH", "kp", 0, "RANGE", 0, 100, "DTYPE", "raw") == expected
        assert expected == get_codec("kivi4g32").encode(data)
    finally:
        server.stop()
