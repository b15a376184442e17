"""The ends of issue 20's per-layer K/V menu (fifth round): ``int4h64`` (4-bit codes, one scale per
head), ``int4h64s128`` and ``kivi8g128s`` (their sink-row forms) -- the docs' worked examples, the
4-bit step between 5 bits and mlx4g32, and a per-layer SCHEMA that uses both ends through a real
pion-server.

(The generic checks -- bounds, NaN refusal, dtypes, partial blobs, row sizes -- run for them in
test_kivi_and_per_head_codecs.py; the sink-row checks in test_sink_row_formats.py; golden vectors in
test_codec_golden_grouped.py.)
"""

from __future__ import annotations

import numpy as np
import redis
from grouped_bounds import per_head_narrow_bound
from support.codec_rows import CodecRows

from pion.codecs import get_codec

KV_DIM = 192  # SmolLM2-135M: 3 KV heads x 64
ROWS = CodecRows(KV_DIM, sink=7.0)
rows, decoded, fetch_f32 = ROWS.rows, ROWS.decoded, ROWS.fetch_f32


def test_int4h64_worked_example_matches_the_docstring() -> None:
    x = np.zeros((1, 128), dtype=np.float32)
    x[0, :4] = [0.5, -1.0, 0.25, 0.0]
    x[0, 64] = 100.0
    codec = get_codec("int4h64")
    blob = codec.encode(x)
    assert len(blob) == 68
    assert (blob[:3].hex(" "), blob[32:34].hex(" "), blob[64:].hex(" ")) == ("1c 8a 88", "8f 88", "92 30 25 4b")
    out = codec.decode(blob, 128)
    assert [round(float(v), 6) for v in out[0, :4]] == [0.571289, -0.999756, 0.285645, 0.0]
    assert round(float(out[0, 64]), 4) == 100.0234


def test_int4h64s128_worked_example_matches_the_docs() -> None:
    x = np.zeros((128, 64), dtype=np.float32)
    x[:, 0] = 0.25
    x[0, :2] = [1.5, -2.0]
    codec = get_codec("int4h64s128")
    row = codec.row_bytes(64)
    assert row == 35
    blob = codec.encode(x)
    assert (blob[:2].hex(" "), blob[32:35].hex(" ")) == ("8f 88", "92 28 00")
    assert [blob[r * row + 34] for r in range(5)] == [0x00, 0x3e, 0x00, 0xc0, 0x00]
    out = codec.decode(blob, 64)
    assert out[0, :3].tolist() == [1.5, -2.0, 0.0]
    assert round(float(out[1, 0]), 6) == 0.249939


def test_kivi8g128s_worked_example_matches_the_docs() -> None:
    x = np.zeros((128, 64), dtype=np.float32)
    x[:, 0] = np.arange(128) / 4
    x[0, :2] = [-30.0, 5.5]
    codec = get_codec("kivi8g128s")
    row = codec.row_bytes(64)
    assert row == 67
    blob = codec.encode(x)
    line = [blob[r * row: (r + 1) * row] for r in range(128)]
    assert [line[r][0] for r in (0, 1, 2, 127)] == [0, 0, 2, 255]
    assert (line[0][64:].hex(" "), line[1][64:].hex(" "), line[64][64:66].hex(" ")) == ("e8 2f 80", "00 00 cf",
                                                                                       "00 34")
    assert [line[r][66] for r in range(4)] == [0x80, 0xcf, 0x80, 0x45]
    out = codec.decode(blob, 64)
    assert out[0, :3].tolist() == [-30.0, 5.5, 0.0]
    assert [round(float(out[r, 0]), 6) for r in (1, 2, 127)] == [0.25, 0.49707, 31.751465]
    assert out[1:, 1].tolist() == [0.0] * 127  # channel 1's range never saw the sink's 5.5


def test_four_bit_per_head_error_sits_between_five_bits_and_mlx4g32_and_keeps_its_bound() -> None:
    """V-like rows (no outlier channels): one scale per 64-value head at 4 bits is coarser than 5 bits
    and, with the same 4 bits, close to mlx4g32's asymmetric groups of 32 at 0.85x its bytes."""
    v = np.random.default_rng(11).standard_normal((256, KV_DIM)).astype(np.float32)
    err = {name: float(np.abs(decoded(name, v) - v).mean()) for name in ("int4h64", "int5h64", "mlx4g32")}
    assert err["int5h64"] < err["int4h64"] < 1.5 * err["mlx4g32"]
    assert get_codec("int4h64").row_bytes(KV_DIM) == 102
    assert get_codec("mlx4g32").row_bytes(KV_DIM) == 120
    assert (np.abs(decoded("int4h64", v).astype(np.float64) - v) <= per_head_narrow_bound(v, 64, 4)).all()


def test_the_eight_bit_sink_k_error_is_below_seven_bits_on_every_row_but_the_exact_sink() -> None:
    k = rows(256, 12)
    err = {b: np.abs(decoded(f"kivi{b}g128s", k) - k) for b in (7, 8)}
    assert decoded("kivi8g128s", k)[[0, 128]].tolist() == k[[0, 128]].astype(np.float16).astype(np.float32).tolist()
    assert float(err[8].mean()) < 0.6 * float(err[7].mean())


def test_a_menu_end_schema_registers_and_restores_what_the_codecs_decode(conn: redis.Redis) -> None:
    """A four-layer SCHEMA with the menu's ends -- K 8 / V 4, K 5 / V 4, K 8 / V 7, and the plain 4-bit V
    -- stores and fetches through the server, sinks exact, range fetches decoded from their 128-token groups."""
    ks = ["kivi8g128s", "kivi5g128s", "kivi8g128s", "kivi6g128s"]
    vs = ["int4h64s128", "int4h64s128", "int7h64s128", "int4h64"]
    k_data, v_data = rows(300, 13), rows(300, 14)
    assert conn.execute_command("KV.PREFIX.REGISTER.SCHEMA", "menu", KV_DIM, 4, *ks, *vs) == b"OK"
    for layer in range(4):
        conn.execute_command("V.STOREBATCH", "menu_pk", layer, 0, k_data.tobytes())
        conn.execute_command("V.STOREBATCH", "menu_pv", layer, 0, v_data.tobytes())
    assert conn.execute_command("KV.PREFIX.LOOKUP", "menu") == b"HIT"
    for layer in range(4):
        assert conn.execute_command("V.FETCH", "menu_pk", layer, "RANGE", 0, 300, "DTYPE", "raw") == \
            get_codec(ks[layer]).encode(k_data)
        assert conn.execute_command("V.FETCH", "menu_pv", layer, "RANGE", 0, 300, "DTYPE", "raw") == \
            get_codec(vs[layer]).encode(v_data)
    assert fetch_f32(conn, "menu_pk", 0, 0, 1).tolist() == [[7.0] * KV_DIM]
    assert fetch_f32(conn, "menu_pv", 1, 0, 1).tolist() == [[7.0] * KV_DIM]
    assert fetch_f32(conn, "menu_pv", 0, 130, 290).tolist() == decoded("int4h64s128", v_data)[130:290].tolist()
    assert fetch_f32(conn, "menu_pk", 2, 200, 300).tolist() == decoded("kivi8g128s", k_data)[200:300].tolist()
    assert fetch_f32(conn, "menu_pv", 3, 5, 9).tolist() == decoded("int4h64", v_data)[5:9].tolist()


def test_a_dim_int4h64s128_cannot_split_is_refused_and_creates_nothing(conn: redis.Redis) -> None:
    try:
        conn.execute_command("V.CREATE", "bad_menu", 96, "VQUANT", "int4h64s128")
    except redis.ResponseError as e:
        assert str(e) == "kv_dim must be a multiple of 64 for int4h64s128"
    else:
        raise AssertionError("V.CREATE accepted kv_dim 96 for int4h64s128")
    assert conn.execute_command("EXISTS", "bad_menu") == 0
