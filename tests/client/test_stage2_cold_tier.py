"""Stage 2 through two pion-server fronts sharing a cold tier: PionPromptCache prefills and stores
a prefix through front A; a reader on front B, which never saw it, gets the same logits as dense
attention over the whole prompt — by the hit path (LOOKUP promotes, the ATTEND side answers
+COLD and is rebuilt) and by the -COLDMISS rehydrate-and-retry of the wire lane."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pion import PionPromptCache, make_pion_prompt_cache
from support.procs import ServerProcess, start_server
from support.redis_cluster import cluster_tools_missing, start_cluster
from support.tiny_llama import dense_suffix_logits, logits, max_err, tiny_llama

PREFIX = list(range(3, 43))  # 40 tokens
SUFFIX = [50, 51, 52, 53, 54, 55]

pytestmark = pytest.mark.skipif(cluster_tools_missing() is not None, reason=str(cluster_tools_missing()))


@pytest.fixture(scope="module")
def tiny() -> Any:
    return tiny_llama("tiny-llama-gqa")


@pytest.fixture(scope="module")
def fronts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    cluster = start_cluster(tmp_path_factory.mktemp("redis-cluster"), masters=3, replicas=0)
    base: Path = tmp_path_factory.mktemp("fronts")
    started: list[ServerProcess] = []
    try:
        started = [start_server(base / f"front-{i}", "--cold-tier", cluster.url) for i in range(2)]
        yield started
    finally:
        for s in started:
            s.stop()
        cluster.stop()




def test_a_reader_on_front_b_restores_a_prefix_stored_through_front_a(
        tiny: Any, fronts: list[ServerProcess], monkeypatch: pytest.MonkeyPatch) -> None:
    want = dense_suffix_logits(tiny, PREFIX, SUFFIX)
    a, b = fronts
    with PionPromptCache(tiny, vquant="fp16", port=a.port, stage2=True) as writer:
        writer.get_or_prefill(PREFIX, namespace="two-fronts-hit")
    monkeypatch.setenv("PION_PROMPT_CACHE_NO_INPROC", "1")
    with PionPromptCache(tiny, vquant="fp16", port=b.port, stage2=True, stage2_lane="resp") as reader:
        cache = reader.get_or_prefill(PREFIX, namespace="two-fronts-hit")  # LOOKUP promotes, WARM rebuilds
        got = logits(tiny, SUFFIX, cache)
        assert (reader.stage2.counters.wire_calls > 0, reader.cold_rehydrates_observed) == (True, 0)
    tiny.set_attn_implementation("sdpa")
    assert max_err(got, want) < 2e-2  # K/V came back from fp16 rows, through the cluster
    with b.client() as r:
        assert r.execute_command("ATTEND.PREFIX.LOOKUP", "two-fronts-hit_attn", 1) == b"HIT"


def test_a_query_on_front_b_answers_coldmiss_and_the_lane_rehydrates_once(
        tiny: Any, fronts: list[ServerProcess], monkeypatch: pytest.MonkeyPatch) -> None:
    want = dense_suffix_logits(tiny, PREFIX, SUFFIX)
    a, b = fronts
    with PionPromptCache(tiny, vquant="fp16", port=a.port, stage2=True) as writer:
        writer.get_or_prefill(PREFIX, namespace="two-fronts-miss")
    monkeypatch.setenv("PION_PROMPT_CACHE_NO_INPROC", "1")
    pc = PionPromptCache(tiny, vquant="fp16", port=b.port, stage2=True, stage2_lane="resp")
    try:
        assert pc.lookup("two-fronts-miss") is False  # promoted into B's V-store; ATTEND side +COLD
        cache = make_pion_prompt_cache(tiny, "two-fronts-miss", pc, len(PREFIX))
        got = logits(tiny, SUFFIX, cache)
        assert pc.cold_rehydrates_observed == 1
        assert pc.lookup("two-fronts-miss") is True
    finally:
        pc.close()
        tiny.set_attn_implementation("sdpa")
    assert max_err(got, want) < 2e-2
