"""KV.PREFIX.* through a real pion-server with redis-py, in RESP2 and RESP3."""

from __future__ import annotations

import itertools
import struct
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
u64 = st.integers(min_value=0, max_value=2**64 - 1)


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(request: pytest.FixtureRequest, shared_pion_server: ServerProcess) -> Iterator[redis.Redis]:
    with shared_pion_server.client(protocol=request.param) as client:
        yield client


def ns(tag: str = "ns") -> str:
    return f"app|v1|{tag}|{next(_ids)}"


def rows(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32).tobytes()


def hash_blob(hashes: list[int]) -> bytes:
    return struct.pack(f"<{len(hashes)}Q", *hashes)


def prefix_info(r: redis.Redis) -> dict[str, int]:
    text = r.execute_command("KV.PREFIX.INFO")
    text = text.decode() if isinstance(text, bytes) else text
    return {k: int(v) for k, v in (line.split(":") for line in text.split("\r\n") if line)}


def lookup(r: redis.Redis, *args: object) -> bytes:
    reply = r.execute_command("KV.PREFIX.LOOKUP", *args)
    return reply.encode() if isinstance(reply, str) else reply


def store_prefix(r: redis.Redis, name: str, n_layers: int, n_tokens: int) -> None:
    pipe = r.pipeline(transaction=False)
    for side in ("_pk", "_pv"):
        for layer in range(n_layers):
            pipe.execute_command("V.STOREBATCH", name + side, layer, 0, rows(n_tokens, layer))
    pipe.execute()


def test_register_creates_both_sides_and_lookup_hits(r: redis.Redis) -> None:
    name = ns()
    assert lookup(r, name) == b"MISS"
    assert r.execute_command("KV.PREFIX.REGISTER", name, D, "fp16") == b"OK"
    assert r.execute_command("V.LIST", name + "_*") == [f"{name}_pk".encode(), f"{name}_pv".encode()]
    store_prefix(r, name, 2, 5)
    assert lookup(r, name) == b"HIT"
    k = r.execute_command("V.FETCH", name + "_pk", 1, "RANGE", 0, 5, "DTYPE", "f16")
    assert k == np.frombuffer(rows(5, 1), "<f4").astype("<f2").tobytes()


def test_reregister_same_params_is_ok_and_other_params_are_refused(r: redis.Redis) -> None:
    name = ns()
    assert r.execute_command("KV.PREFIX.REGISTER", name, D, "fp16") == b"OK"
    assert r.execute_command("KV.PREFIX.REGISTER", name, D, "fp16", "BLOCKS", 16, 1, hash_blob([9])) == b"OK"
    assert r.execute_command("KV.PREFIX.BLOCKS", name) == struct.pack("<IIQ", 16, 1, 9)
    assert "registered with kv_dim 64 and format fp16" in err(r, "KV.PREFIX.REGISTER", name, D, "int8")
    assert "registered" in err(r, "KV.PREFIX.REGISTER", name, 32, "fp16")


def test_register_refuses_a_group_format_with_a_bad_dim(r: redis.Redis) -> None:
    name = ns()
    assert err(r, "KV.PREFIX.REGISTER", name, 48, "turbo4") == "kv_dim must be a multiple of 32 for turbo4"
    assert r.execute_command("V.LIST", name + "*") == []


def test_layers_gates_lookup_until_both_sides_hold_every_layer(r: redis.Redis) -> None:
    name = ns()
    r.execute_command("KV.PREFIX.REGISTER", name, D, "fp16", "LAYERS", 3)
    assert lookup(r, name) == b"MISS"
    for layer in range(3):
        r.execute_command("V.STOREBATCH", name + "_pk", layer, 0, rows(4))
    for layer in range(2):
        r.execute_command("V.STOREBATCH", name + "_pv", layer, 0, rows(4))
    assert lookup(r, name) == b"MISS"
    r.execute_command("V.STOREBATCH", name + "_pv", 2, 0, rows(3))
    assert lookup(r, name) == b"MISS"
    r.execute_command("V.STOREBATCH", name + "_pv", 2, 3, rows(1))
    assert lookup(r, name) == b"HIT"


def test_register_schema_stores_per_layer_formats_and_implies_layers(r: redis.Redis) -> None:
    name = ns()
    assert r.execute_command("KV.PREFIX.REGISTER.SCHEMA", name, D, 3, "fp16", "fp16", "fp16",
                             "fp16", "fp8", "fp16", "PREFILL_MS", 40) == b"OK"
    assert r.execute_command("KV.PREFIX.REGISTER.SCHEMA", name, D, 3, "fp16", "fp16", "fp16",
                             "fp16", "fp8", "fp16") == b"OK"
    assert "registered" in err(r, "KV.PREFIX.REGISTER.SCHEMA", name, D, 3, *["fp16"] * 6)
    assert "registered" in err(r, "KV.PREFIX.REGISTER", name, D, "fp16")
    store_prefix(r, name, 2, 4)
    assert lookup(r, name) == b"MISS"  # layer 2 missing on both sides
    store_prefix(r, name, 3, 4)
    assert lookup(r, name) == b"HIT"
    assert len(r.execute_command("V.FETCH", name + "_pv", 1, "RANGE", 0, 4, "DTYPE", "raw")) == 4 * 68
    assert len(r.execute_command("V.FETCH", name + "_pk", 1, "RANGE", 0, 4, "DTYPE", "raw")) == 4 * 2 * D


def test_drop_counts_held_prefixes_only(r: redis.Redis) -> None:
    a, b = ns(), ns()
    r.execute_command("KV.PREFIX.REGISTER", a, D, "fp16")
    r.execute_command("KV.PREFIX.REGISTER", b, D, "fp16")
    assert r.execute_command("KV.PREFIX.DROP", a, b, ns("never")) == 2
    assert r.execute_command("V.LIST", a + "*") == []
    assert lookup(r, a) == b"MISS"
    assert r.execute_command("KV.PREFIX.DROP", a) == 0


def test_blocks_returns_the_table_or_unknown(r: redis.Redis) -> None:
    name, hashes = ns(), [5, 2**64 - 1, 0, 77]
    r.execute_command("KV.PREFIX.REGISTER", name, D, "fp16", "BLOCKS", 64, 4, hash_blob(hashes))
    assert r.execute_command("KV.PREFIX.BLOCKS", name) == struct.pack("<II4Q", 64, 4, *hashes)
    plain = ns()
    r.execute_command("KV.PREFIX.REGISTER", plain, D, "fp16")
    assert r.execute_command("KV.PREFIX.BLOCKS", plain) == b"UNKNOWN"
    assert r.execute_command("KV.PREFIX.BLOCKS", ns("never")) == b"UNKNOWN"
    assert r.execute_command("KV.PREFIX.MEMBERSHIP", plain, 1, hash_blob([1])) == b"UNKNOWN"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=st.lists(u64, max_size=300), extra=st.lists(u64, max_size=100), data=st.data())
def test_membership_bitmap_matches_a_python_set(shared_pion_server: ServerProcess, table: list[int],
                                                extra: list[int], data: st.DataObject) -> None:
    picked = data.draw(st.lists(st.sampled_from(table), max_size=100)) if table else []
    probes = data.draw(st.permutations(picked + extra))
    name = ns("member")
    with shared_pion_server.client() as r:
        r.execute_command("KV.PREFIX.REGISTER", name, D, "fp16", "BLOCKS", 16, len(table), hash_blob(table))
        bitmap = r.execute_command("KV.PREFIX.MEMBERSHIP", name, len(probes), hash_blob(probes))
        r.execute_command("KV.PREFIX.DROP", name)
    assert len(bitmap) == (len(probes) + 7) // 8
    wanted = set(table)
    bits = [(bitmap[i // 8] >> (i % 8)) & 1 for i in range(len(probes))]
    assert bits == [int(p in wanted) for p in probes]


def test_info_reports_prefix_and_vstore_totals(r: redis.Redis) -> None:
    before = prefix_info(r)
    name = ns()
    r.execute_command("KV.PREFIX.REGISTER", name, D, "fp16")
    store_prefix(r, name, 2, 7)
    r.execute_command("V.MFETCH", name + "_pk", 0, 2, "RANGE", 0, 7)
    after = prefix_info(r)
    assert list(after)[:6] == ["registered_prefixes", "total_prefix_tokens", "vstore_sessions",
                               "vstore_total_fetches", "vstore_bytes", "wal_bytes"]
    assert after["registered_prefixes"] == before["registered_prefixes"] + 1
    assert after["total_prefix_tokens"] == before["total_prefix_tokens"] + 7
    assert after["vstore_sessions"] == before["vstore_sessions"] + 2
    assert after["vstore_total_fetches"] == before["vstore_total_fetches"] + 2
    assert after["vstore_bytes"] == before["vstore_bytes"] + 4 * 7 * D * 2
    r.execute_command("KV.PREFIX.DROP", name)


@pytest.mark.parametrize("args, wording", [
    (("KV.PREFIX.REGISTER", "n", "64"), "wrong number of arguments for 'kv.prefix.register' command"),
    (("KV.PREFIX.REGISTER", "n", "x", "fp16"), "not an integer"),
    (("KV.PREFIX.REGISTER", "n", "64", "fp77"), "unknown format 'fp77'"),
    (("KV.PREFIX.REGISTER", "n", "64", "fp16", "BLOCKS", "16", "2"), "BLOCKS needs 3 values"),
    (("KV.PREFIX.REGISTER", "n", "64", "fp16", "BLOCKS", "16", "2", "short"), "expected hash_count x 8 = 16"),
    (("KV.PREFIX.REGISTER", "n", "64", "fp16", "BLOCKS", "0", "0", ""), "block_size must be"),
    (("KV.PREFIX.REGISTER", "n", "64", "fp16", "LAYERS", "0"), "LAYERS must be"),
    (("KV.PREFIX.REGISTER", "n", "64", "fp16", "PREFILL_MS", "-3"), "PREFILL_MS must be"),
    (("KV.PREFIX.REGISTER", "n", "64", "fp16", "PREFILL_MS", "nan"), "PREFILL_MS must be"),
    (("KV.PREFIX.REGISTER", "n", "64", "fp16", "WHATEVER"), "syntax error near 'WHATEVER'"),
    (("KV.PREFIX.REGISTER.SCHEMA", "n", "64", "2", "fp16", "fp16", "fp16"), "needs 4 formats"),
    (("KV.PREFIX.REGISTER.SCHEMA", "n", "64", "1", "fp16", "fp16", "LAYERS", "1"), "syntax error near 'LAYERS'"),
    (("KV.PREFIX.MEMBERSHIP", "n", "2", "x" * 8), "expected hash_count x 8 = 16"),
    (("KV.PREFIX.MEMBERSHIP", "n", "-1", ""), "hash_count must be"),
    (("KV.PREFIX.BLOCKS",), "wrong number of arguments for 'kv.prefix.blocks' command"),
    (("KV.PREFIX.DROP",), "wrong number of arguments for 'kv.prefix.drop' command"),
    (("KV.PREFIX.INFO", "x"), "wrong number of arguments for 'kv.prefix.info' command"),
])
def test_bad_input_is_refused_and_registers_nothing(r: redis.Redis, args: tuple[str, ...], wording: str) -> None:
    assert wording in err(r, *args)
    assert r.execute_command("V.LIST", "n_*") == []
    assert r.execute_command("KV.PREFIX.BLOCKS", "n") == b"UNKNOWN"


@pytest.mark.parametrize("options, wording", [
    (("TOKENS",), "TOKENS needs 1 value"),
    (("TOKENS", "many"), "not an integer"),
    (("TOKENS", "-2"), "TOKENS must be"),
    (("PREFILL_MS",), "PREFILL_MS needs 1 value"),
    (("PREFILL_MS", "fast"), "not a valid float"),
    (("TOKENS", "5", "BOGUS", "1"), "syntax error near 'BOGUS'"),
])
def test_lookup_with_unknown_option_or_missing_value_records_nothing(
        r: redis.Redis, options: tuple[str, ...], wording: str) -> None:
    name = ns()
    r.execute_command("KV.PREFIX.REGISTER", name, D, "fp16")
    before = stats(r)
    assert wording in err(r, "KV.PREFIX.LOOKUP", name, *options)
    after = stats(r)
    assert {k: v for k, v in after.items() if k != "uptime_seconds"} == {
        k: v for k, v in before.items() if k != "uptime_seconds"}
