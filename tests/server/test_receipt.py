"""PION.STATS crediting (measured vs estimated) through a real pion-server."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import redis

from support.procs import ServerProcess, start_server

D = 32
FIELDS = ["kvprefix_hits", "kvprefix_misses", "kvprefix_tokens_served", "kvprefix_bytes_served",
          "prefill_seconds_avoided", "prefill_seconds_avoided_measured", "kvprefix_hits_measured",
          "semantic_hits", "semantic_misses", "moe_hits", "moe_misses", "vector_queries",
          "uptime_seconds", "kvprefix_hit_rate", "semantic_hit_rate", "prefill_seconds_avoided_estimated"]


@pytest.fixture(scope="module")
def receipt_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module, 1000 us per estimated token."""
    proc = start_server(tmp_path_factory.mktemp("receipt"), "--prefill-us-per-token", "1000")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def server(receipt_server: ServerProcess) -> ServerProcess:
    """The module's server with its data flushed and its counters zeroed."""
    with receipt_server.client() as r:
        r.execute_command("KV.PREFIX.DROP", "measured", "estimated", "leaf", "chain", "p")
        assert r.execute_command("PION.STATS", "RESET") == b"OK"
    return receipt_server


def as_dict(reply: object) -> dict[str, object]:
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    assert isinstance(reply, dict)
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}


def number(value: object) -> float:
    return float(value.decode() if isinstance(value, bytes) else value)  # type: ignore[arg-type, union-attr]


def register_and_store(r: redis.Redis, ns: str, n_tokens: int, *options: object) -> None:
    r.execute_command("KV.PREFIX.REGISTER", ns, D, "fp16", *options)
    blob = np.ones((n_tokens, D), np.float32).tobytes()
    r.execute_command("V.STOREBATCH", f"{ns}_pk", 0, 0, blob)
    r.execute_command("V.STOREBATCH", f"{ns}_pv", 0, 0, blob)


@pytest.mark.parametrize("protocol", [2, 3])
def test_stats_has_exactly_the_sixteen_fields_in_order(server: ServerProcess, protocol: int) -> None:
    with server.client(protocol=protocol) as r:
        stats = as_dict(r.execute_command("PION.STATS"))
    assert list(stats) == FIELDS
    if protocol == 3:
        assert stats["kvprefix_hit_rate"] == 0.0
    else:
        assert stats["kvprefix_hit_rate"] == b"0.0"


def test_hit_on_prefix_registered_with_prefill_ms_is_credited_exactly_that(server: ServerProcess) -> None:
    with server.client(protocol=3) as r:
        register_and_store(r, "measured", 100, "PREFILL_MS", "250")
        assert r.execute_command("KV.PREFIX.LOOKUP", "measured") == b"HIT"
        stats = as_dict(r.execute_command("PION.STATS"))
    assert stats["kvprefix_hits"] == 1
    assert stats["kvprefix_hits_measured"] == 1
    assert stats["kvprefix_tokens_served"] == 100
    assert stats["prefill_seconds_avoided_measured"] == 0.25
    assert stats["prefill_seconds_avoided_estimated"] == 0.0
    assert stats["prefill_seconds_avoided"] == 0.25


def test_hit_without_prefill_ms_is_estimated_from_tokens(server: ServerProcess) -> None:
    with server.client(protocol=3) as r:
        register_and_store(r, "estimated", 300)
        r.execute_command("KV.PREFIX.LOOKUP", "estimated")
        r.execute_command("KV.PREFIX.LOOKUP", "nowhere")
        stats = as_dict(r.execute_command("PION.STATS"))
    assert (stats["kvprefix_hits"], stats["kvprefix_misses"], stats["kvprefix_hits_measured"]) == (1, 1, 0)
    assert stats["prefill_seconds_avoided_estimated"] == 0.3  # 300 tokens x 1000 us
    assert stats["prefill_seconds_avoided_measured"] == 0.0
    assert stats["kvprefix_hit_rate"] == 0.5


def test_lookup_tokens_and_prefill_ms_override_what_is_credited(server: ServerProcess) -> None:
    with server.client(protocol=2) as r:
        register_and_store(r, "leaf", 10, "PREFILL_MS", "999")
        r.execute_command("KV.PREFIX.LOOKUP", "leaf", "TOKENS", "500")
        r.execute_command("KV.PREFIX.LOOKUP", "leaf", "TOKENS", "40", "PREFILL_MS", "80")
        stats = as_dict(r.execute_command("PION.STATS"))
    assert stats["kvprefix_tokens_served"] == 540
    assert number(stats["prefill_seconds_avoided_measured"]) == pytest.approx(0.999 + 0.08)
    assert stats["kvprefix_hits_measured"] == 2


def test_lookup_tokens_on_an_unregistered_time_is_estimated(server: ServerProcess) -> None:
    with server.client(protocol=3) as r:
        register_and_store(r, "chain", 10)
        r.execute_command("KV.PREFIX.LOOKUP", "chain", "TOKENS", "2000")
        stats = as_dict(r.execute_command("PION.STATS"))
    assert stats["prefill_seconds_avoided_estimated"] == 2.0
    assert stats["kvprefix_tokens_served"] == 2000


def test_reset_zeroes_counters_but_not_uptime(server: ServerProcess) -> None:
    with server.client(protocol=3) as r:
        register_and_store(r, "p", 5)
        r.execute_command("KV.PREFIX.LOOKUP", "p")
        r.execute_command("V.FETCH", "p_pk", 0, "RANGE", 0, 5)
        assert r.execute_command("PION.STATS", "RESET") == b"OK"
        stats = as_dict(r.execute_command("PION.STATS"))
        with pytest.raises(redis.ResponseError, match="syntax error"):
            r.execute_command("PION.STATS", "RESETALL")
    assert {k: v for k, v in stats.items() if k != "uptime_seconds"} == {
        k: (0.0 if isinstance(v, float) else 0) for k, v in stats.items() if k != "uptime_seconds"}


def test_info_pion_section_shows_the_receipt(server: ServerProcess) -> None:
    with server.client(protocol=2) as r:
        register_and_store(r, "p", 5)
        r.execute_command("KV.PREFIX.LOOKUP", "p")
        section = r.info("pion")
    assert list(section) == FIELDS
    assert section["kvprefix_hits"] == 1
    assert section["prefill_seconds_avoided_estimated"] == 0.005
