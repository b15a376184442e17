"""The dev-chosen per-layer K/V bit mixes of issue 20 (``benchmarks/kv_bit_split.py``): the knapsack
picks the least-KL pairs within 12 bits a layer on average, the committed mixes stay at 306 bytes a
token (39.8% of fp16's) at SmolLM2's kv_dim, and a 30-layer mix registers through
KV.PREFIX.REGISTER.SCHEMA on a real server and restores, layer by layer, what each layer's codecs decode."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import redis

from pion.codecs import get_codec

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
from kv_bit_budget import choose, pair_key  # noqa: E402

MIXES = [BENCH / "data" / f"kv_bit_split{name}_smollm2.json"
         for name in ("", "_same_bytes", "_menu", "_menu_more_queries")]  # _menu*: K 5..8 x V 4..7 (fifth round)
KV_DIM = 192  # SmolLM2-135M: 3 KV heads x 64


def table(values: dict[tuple[int, int], list[float]]) -> dict[str, list[float]]:
    return {pair_key(b, c): kl for (b, c), kl in values.items()}


def test_the_knapsack_moves_bits_to_the_sensitive_layer_within_the_mean_budget() -> None:
    kl = table({(5, 5): [9.0, 1.0], (6, 6): [5.0, 0.5], (7, 7): [1.0, 0.4], (7, 5): [4.0, 0.9]})
    assert choose(kl, 2, same_bytes=False) == [(7, 7), (5, 5)]  # 14 + 10 = 24 bits: KL 2.0
    assert choose(kl, 2, same_bytes=True) == [(7, 5), (6, 6)]  # only 12-bit pairs: KL 4.5


def test_the_knapsack_offers_a_pair_only_on_the_layers_where_it_was_measured() -> None:
    kl: dict[str, list[float | None]] = {"K6/V6": [5.0, 0.5, 0.6], "K8/V6": [None, 0.1, 1.0],
                                         "K6/V4": [4.9, 0.45, 0.59]}
    # K8/V6 on layer 0 would be best (unmeasured there); layer 1 takes it, paid for by V4 on the others
    assert choose(kl, 3, same_bytes=False) == [(6, 4), (8, 6), (6, 4)]
    assert choose(kl, 3, same_bytes=True) == [(6, 6), (6, 6), (6, 6)]


def test_the_knapsack_refuses_a_table_with_no_pair_that_fits() -> None:
    with pytest.raises(ValueError) as info:
        choose(table({(7, 7): [1.0]}), 1, same_bytes=False)
    assert str(info.value) == "the budget is below the cheapest pair on every layer"
    with pytest.raises(ValueError) as info:
        choose(table({(7, 7): [1.0]}), 1, same_bytes=True)
    assert str(info.value) == "no (K, V) pair in the table fits the budget"


@pytest.mark.parametrize("path", MIXES, ids=lambda p: p.stem)
def test_a_committed_mix_is_what_its_own_table_chooses_at_306_bytes_a_token(path: Path) -> None:
    mix = json.loads(path.read_text())
    same_bytes = "same bytes" in mix["label"]
    chosen = choose(mix["mean_kl_per_layer"], 30, same_bytes)
    assert [(int(k[4]), int(v[3])) for k, v in zip(mix["k"], mix["v"], strict=True)] == chosen
    per_layer = [get_codec(k).row_bytes(KV_DIM) + get_codec(v).row_bytes(KV_DIM) for k, v in zip(mix["k"], mix["v"])]
    assert sum(per_layer) == 306 * 30
    assert round(mix["bytes_vs_fp16"], 4) == round(306 / (4 * KV_DIM), 4)


@pytest.mark.parametrize("path", [MIXES[0], MIXES[2]], ids=lambda p: p.stem)
def test_the_moved_bytes_mix_registers_through_schema_and_restores_every_layer(conn: redis.Redis, path: Path) -> None:
    mix = json.loads(path.read_text())
    sid = path.stem
    rng = np.random.default_rng(40)
    k_data = rng.standard_normal((260, KV_DIM)).astype(np.float32)
    k_data[:, 5] += 20  # an outlier channel, as in K
    v_data = rng.standard_normal((260, KV_DIM)).astype(np.float32)
    k_data[0] = v_data[0] = 6.0  # an attention sink
    assert conn.execute_command("KV.PREFIX.REGISTER.SCHEMA", sid, KV_DIM, 30, *mix["k"], *mix["v"]) == b"OK"
    for layer in range(30):
        conn.execute_command("V.STOREBATCH", f"{sid}_pk", layer, 0, k_data.tobytes())
        conn.execute_command("V.STOREBATCH", f"{sid}_pv", layer, 0, v_data.tobytes())
    assert conn.execute_command("KV.PREFIX.LOOKUP", sid) == b"HIT"
    for layer, (k_fmt, v_fmt) in enumerate(zip(mix["k"], mix["v"], strict=True)):
        assert conn.execute_command("V.FETCH", f"{sid}_pk", layer, "RANGE", 0, 260, "DTYPE", "raw") == \
            get_codec(k_fmt).encode(k_data)
        assert conn.execute_command("V.FETCH", f"{sid}_pv", layer, "RANGE", 0, 260, "DTYPE", "raw") == \
            get_codec(v_fmt).encode(v_data)
    sink = np.frombuffer(conn.execute_command("V.FETCH", f"{sid}_pk", 18, "RANGE", 0, 1), dtype="<f4")
    assert sink.tolist() == [6.0] * KV_DIM
