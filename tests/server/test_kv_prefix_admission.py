"""--admission 2hit through a real pion-server: the first KV.PREFIX.REGISTER of a namespace answers
+DEFERRED and records nothing but the name, the second admits it, the ghost list is bounded, and
the counters show in KV.PREFIX.INFO and PION.STATS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pion.server.admission import Admission
from support.procs import ServerProcess, start_server
from support.replies import err, stats


def prefix_info(r: redis.Redis) -> dict[str, int]:
    text = r.execute_command("KV.PREFIX.INFO").decode()
    return {k: int(v) for k, v in (line.split(":") for line in text.split("\r\n") if line)}


@pytest.fixture(scope="module")
def two_hit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("admission"), "--admission", "2hit", "--admission-window", "2")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def r(two_hit: ServerProcess) -> Iterator[redis.Redis]:
    conn = two_hit.client()
    conn.flushall()
    conn.execute_command("PION.STATS", "RESET")
    try:
        yield conn
    finally:
        conn.close()


def test_first_register_is_deferred_and_creates_nothing(r: redis.Redis) -> None:
    wal_before = prefix_info(r)["wal_bytes"]
    assert r.execute_command("KV.PREFIX.REGISTER", "once", "4", "fp16") == b"DEFERRED"
    assert r.execute_command("V.LIST") == []
    assert r.execute_command("KV.PREFIX.LOOKUP", "once") == b"MISS"
    info = prefix_info(r)
    assert (info["registered_prefixes"], info["wal_bytes"], info["admission_deferred"],
            info["admission_ghost_entries"]) == (0, wal_before, 1, 1)


def test_second_register_admits_and_later_ones_are_never_deferred(r: redis.Redis) -> None:
    assert r.execute_command("KV.PREFIX.REGISTER", "twice", "4", "fp16") == b"DEFERRED"
    assert r.execute_command("KV.PREFIX.REGISTER", "twice", "4", "fp16") == b"OK"
    assert r.execute_command("V.LIST") == [b"twice_pk", b"twice_pv"]
    assert r.execute_command("KV.PREFIX.REGISTER", "twice", "4", "fp16") == b"OK"
    info = prefix_info(r)
    assert (info["admission_2hit"], info["admission_deferred"], info["admission_admitted"],
            info["admission_ghost_entries"]) == (1, 1, 2, 0)


def test_register_schema_is_admitted_on_the_second_sight_too(r: redis.Redis) -> None:
    args = ("KV.PREFIX.REGISTER.SCHEMA", "schema", "4", "1", "fp16", "fp16")
    assert [r.execute_command(*args), r.execute_command(*args)] == [b"DEFERRED", b"OK"]


def test_a_bad_register_is_refused_and_not_remembered(r: redis.Redis) -> None:
    assert err(r, "KV.PREFIX.REGISTER", "bad", "0", "fp16") == "kv_dim must be 1..1048576, got 0"
    assert prefix_info(r)["admission_ghost_entries"] == 0
    assert r.execute_command("KV.PREFIX.REGISTER", "bad", "4", "fp16") == b"DEFERRED"


def test_the_ghost_list_forgets_its_oldest_name_past_the_window(r: redis.Redis) -> None:
    evicted_before = prefix_info(r)["admission_ghost_evictions"]
    for ns in ("n1", "n2", "n3"):  # window 2: n1 is forgotten when n3 arrives
        assert r.execute_command("KV.PREFIX.REGISTER", ns, "4", "fp16") == b"DEFERRED"
    assert r.execute_command("KV.PREFIX.REGISTER", "n1", "4", "fp16") == b"DEFERRED"  # n2 goes
    assert r.execute_command("KV.PREFIX.REGISTER", "n3", "4", "fp16") == b"OK"
    info = prefix_info(r)
    assert (info["admission_ghost_entries"], info["admission_ghost_evictions"] - evicted_before) == (1, 2)


def test_pion_stats_adds_the_admission_counters_under_2hit(r: redis.Redis) -> None:
    r.execute_command("KV.PREFIX.REGISTER", "counted", "4", "fp16")
    r.execute_command("KV.PREFIX.REGISTER", "counted", "4", "fp16")
    receipt = stats(r)
    assert (len(receipt), receipt["admission_deferred"], receipt["admission_admitted"]) == (18, 1, 1)


def test_default_policy_admits_the_first_register(tmp_path: Path) -> None:
    proc = start_server(tmp_path)
    try:
        with proc.client() as conn:
            assert conn.execute_command("KV.PREFIX.REGISTER", "ns", "4", "fp16") == b"OK"
            info = prefix_info(conn)
            assert (info["admission_2hit"], info["admission_admitted"], len(stats(conn))) == (0, 1, 16)
    finally:
        proc.stop()


def test_admission_policy_unit_contract() -> None:
    policy = Admission("2hit", window=1)
    assert [policy.should_defer("a", held=False), policy.should_defer("a", held=False)] == [True, False]
    assert policy.should_defer("b", held=True) is False  # already held: never deferred
    assert policy.should_defer("c", held=False) is True  # evicts "a" (window 1)
    assert (policy.ghost_entries, policy.ghost_evictions) == (1, 1)
    assert Admission("always").should_defer("x", held=False) is False


def test_admit_registers_at_once_under_2hit(r: redis.Redis) -> None:
    assert r.execute_command("KV.PREFIX.REGISTER", "ingest", "4", "fp16", "LAYERS", "1", "ADMIT") == b"OK"
    assert r.execute_command("KV.PREFIX.REGISTER.SCHEMA", "ingest2", "4", "1", "fp16", "fp16", "ADMIT") == b"OK"
    info = prefix_info(r)
    assert (info["registered_prefixes"], info["admission_deferred"], info["admission_ghost_entries"]) == (2, 0, 0)
