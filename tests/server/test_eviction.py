"""LRU eviction through a real pion-server: K/V pairs go together, under --max-sessions and --maxmemory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import redis

from support.procs import start_server

D = 64
ROW_FP16 = 2 * D


def rows(n: int) -> bytes:
    return np.ones((n, D), np.float32).tobytes()


def register(r: redis.Redis, ns: str, n_tokens: int = 0) -> None:
    r.execute_command("KV.PREFIX.REGISTER", ns, D, "fp16")
    if n_tokens:
        r.execute_command("V.STOREBATCH", f"{ns}_pk", 0, 0, rows(n_tokens))
        r.execute_command("V.STOREBATCH", f"{ns}_pv", 0, 0, rows(n_tokens))


def test_full_session_table_evicts_the_least_recent_prefix_both_sides(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--max-sessions", "5", "--loglevel", "verbose")
    try:
        with server.client() as r:
            register(r, "a", 1)
            register(r, "b", 1)
            r.execute_command("V.CREATE", "solo", D)
            assert r.execute_command("KV.PREFIX.LOOKUP", "a") == b"HIT"  # a is now newer than b
            register(r, "c", 1)
            assert r.execute_command("V.LIST") == [b"a_pk", b"a_pv", b"c_pk", b"c_pv", b"solo"]
            assert r.execute_command("KV.PREFIX.LOOKUP", "b") == b"MISS"
            r.execute_command("V.FETCH", "c_pk", 0, "RANGE", 0, 1)
            r.execute_command("V.FETCH", "a_pv", 0, "RANGE", 0, 1)
            r.execute_command("V.FETCH", "a_pk", 0, "RANGE", 0, 1)
            r.execute_command("V.FETCH", "c_pv", 0, "RANGE", 0, 1)
            # LRU is now solo, then c_pk: making room for 2 takes solo and then c as a whole pair.
            register(r, "d")
            assert r.execute_command("V.LIST") == [b"a_pk", b"a_pv", b"d_pk", b"d_pv"]
        assert "evicted b_pk b_pv (least recently used, max-sessions)" in server.log()
        assert "evicted c_pk c_pv (least recently used, max-sessions)" in server.log()
    finally:
        server.stop()


def test_byte_budget_evicts_pairs_and_refuses_a_write_that_cannot_fit(tmp_path: Path) -> None:
    budget = 100 * ROW_FP16
    server = start_server(tmp_path / "data", "--maxmemory", str(budget))
    try:
        with server.client() as r:
            register(r, "a", 20)
            register(r, "b", 20)  # 80 rows held
            assert r.execute_command("KV.PREFIX.LOOKUP", "a") == b"HIT"
            register(r, "c", 20)  # needs 40 more: b (least recent) goes, both sides
            assert r.execute_command("V.LIST") == [b"a_pk", b"a_pv", b"c_pk", b"c_pv"]
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                r.execute_command("V.STOREBATCH", "c_pk", 0, 20, rows(81))
            assert r.execute_command("V.LIST") == [b"a_pk", b"a_pv", b"c_pk", b"c_pv"]
            assert r.execute_command("V.INFO", "c_pk")[11] == 20
    finally:
        server.stop()


def test_keyspace_bytes_share_the_budget(tmp_path: Path) -> None:
    budget = 100 * ROW_FP16
    server = start_server(tmp_path / "data", "--maxmemory", str(budget))
    try:
        with server.client() as r:
            register(r, "a", 10)  # 20 rows
            r.set("big", b"x" * (70 * ROW_FP16))
            register(r, "b")
            r.execute_command("V.STOREBATCH", "b_pk", 0, 0, rows(15))  # 20 + 70 + 15 > 100: a goes
            assert r.execute_command("KV.PREFIX.LOOKUP", "a") == b"MISS"
    finally:
        server.stop()


def test_a_keyspace_write_evicts_prefixes_to_fit_the_budget(tmp_path: Path) -> None:
    budget = 100 * ROW_FP16
    server = start_server(tmp_path / "data", "--maxmemory", str(budget))
    try:
        with server.client() as r:
            register(r, "a", 20)  # 40 rows
            assert r.set("big", b"x" * (70 * ROW_FP16)) is True
            assert r.execute_command("V.LIST") == []
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                r.set("bigger", b"x" * (101 * ROW_FP16))
    finally:
        server.stop()
