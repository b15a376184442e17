"""pion-serve --route: the centroid classifier, the routing table, and routing end to end.

The classifier tests embed with the real all-MiniLM-L6-v2 (the model pion-server embeds
with); the end-to-end tests start a real pion-server, two OpenAI-compatible test servers
(one per tier) and pion-serve, and talk to it with the openai SDK.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pion.common.errors import ConfigError
from pion.proxy.config import BACKENDS
from pion.proxy.router import (COMPLEX_SEEDS, DEFAULT_ROUTING, SIMPLE_SEEDS, CentroidClassifier, IntentRouter,
                               Tier, load_routing)
from support.fake_backends import FakeBackend, running
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder


@pytest.fixture(scope="module")
def minilm() -> CentroidClassifier:
    from pion.server.semantic.embedder import MiniLMEmbedder

    vecs = MiniLMEmbedder().encode(list(SIMPLE_SEEDS + COMPLEX_SEEDS))
    return CentroidClassifier.from_seed_vectors(vecs[:20], vecs[20:])


def _embed(texts: list[str]) -> np.ndarray:
    from pion.server.semantic.embedder import MiniLMEmbedder

    return MiniLMEmbedder().encode(texts)


def test_seed_sets_have_twenty_queries_each() -> None:
    assert (len(SIMPLE_SEEDS), len(COMPLEX_SEEDS)) == (20, 20)


def test_held_out_simple_and_complex_questions_land_in_their_tiers(minilm: CentroidClassifier) -> None:
    simple = ["What is the capital of Italy?", "How many legs does a spider have?"]
    complex_ = ["Explain the trade-offs between eventual and strong consistency in a replicated database "
                "and how they affect application design.",
                "Analyse the long-term macroeconomic effects of quantitative easing on asset prices."]
    vecs = _embed(simple + complex_)
    tiers = [minilm.classify(t, v).tier for t, v in zip(simple + complex_, vecs)]
    assert tiers == ["simple", "simple", "complex", "complex"]


def test_margin_splits_simple_medium_and_complex_on_the_centroid_difference() -> None:
    s, c = np.array([1.0, 0.0, 0.0], np.float32), np.array([0.0, 1.0, 0.0], np.float32)
    clf = CentroidClassifier(s, c, margin=0.05)
    words = "one two three four five six seven eight"
    near_simple = np.array([0.6, 0.5, 0.62], np.float32)   # diff +0.1
    tie = np.array([0.5, 0.48, 0.72], np.float32)          # diff +0.02
    near_complex = np.array([0.5, 0.6, 0.62], np.float32)  # diff -0.1
    assert [clf.classify(words, v).tier for v in (near_simple, tie, near_complex)] == ["simple", "medium", "complex"]
    assert CentroidClassifier(s, c, margin=0.15).classify(words, near_simple).tier == "medium"


@pytest.mark.parametrize("text", [
    "Why does this fail?\n```python\nprint(x)\n```",
    "def area(r): return 3.14 * r * r  -- is this right?",
    "class Node: pass",
    "SELECT name FROM users WHERE id = 3",
    "Traceback (most recent call last): File x.py line 3 ZeroDivisionError",
])
def test_code_sql_and_tracebacks_force_complex_even_when_the_centroid_says_simple(text: str) -> None:
    s, c = np.array([1.0, 0.0], np.float32), np.array([0.0, 1.0], np.float32)
    decision = CentroidClassifier(s, c).classify(text, np.array([1.0, 0.0], np.float32))
    assert (decision.tier, decision.heuristic_boost, decision.confidence) == ("complex", "code", 1.0)


def test_short_complex_query_drops_to_medium_and_long_simple_query_bumps_to_medium() -> None:
    s, c = np.array([1.0, 0.0], np.float32), np.array([0.0, 1.0], np.float32)
    clf = CentroidClassifier(s, c)
    short = clf.classify("prove the Riemann hypothesis", np.array([0.0, 1.0], np.float32))
    long_ = clf.classify(" ".join(["word"] * 60), np.array([1.0, 0.0], np.float32))
    assert (short.tier, short.heuristic_boost) == ("medium", "short_query")
    assert (long_.tier, long_.heuristic_boost) == ("medium", "long_query")
    assert clf.classify(" ".join(["word"] * 59), np.array([1.0, 0.0], np.float32)).tier == "simple"


def test_no_embedding_falls_back_to_medium_and_counts_as_unclassified() -> None:
    async def down(texts: list[str]) -> np.ndarray | None:
        return None

    router = IntentRouter(DEFAULT_ROUTING, down)
    decision = asyncio.run(router.classify("What is the capital of France?", None))
    assert (decision.tier, decision.classified, decision.heuristic_boost) == ("medium", False, "no_embedding")
    assert router.schema()["unclassified"] == 1
    assert router.schema()["classified_total"] == 0


def test_cost_is_accumulated_from_real_token_usage_per_tier() -> None:
    async def down(texts: list[str]) -> np.ndarray | None:
        return None

    router = IntentRouter({"simple": Tier("x", "a", 1.0), "medium": Tier("x", "b", 3.0),
                           "complex": Tier("x", "c", 15.0)}, down)
    router.account("simple", {"prompt_tokens": 400_000, "completion_tokens": 600_000, "total_tokens": 1_000_000})
    router.account("complex", {"total_tokens": 2_000})
    router.account("medium", None, estimate_chars=4_000)  # a stream without usage: 1,000 tokens estimated
    doc = router.schema()
    assert doc["estimated_cost_usd"] == round(1.0 + 2_000 * 15 / 1e6 + 1_000 * 3 / 1e6, 6)
    assert (doc["tokens"], doc["usage_estimated"]) == ({"simple": 1_000_000, "medium": 1_000, "complex": 2_000}, 1)


def test_route_config_overrides_only_the_listed_tiers(tmp_path: Path) -> None:
    path = tmp_path / "routing.json"
    path.write_text(json.dumps({"simple": {"backend": "ollama", "model": "smollm:135m", "cost_per_mtok": 0.05,
                                           "base_url": "http://10.0.0.5:11434"}}))
    table = load_routing(str(path), BACKENDS)
    assert table["simple"] == Tier("ollama", "smollm:135m", 0.05, "http://10.0.0.5:11434")
    assert (table["medium"], table["complex"]) == (DEFAULT_ROUTING["medium"], DEFAULT_ROUTING["complex"])


@pytest.mark.parametrize("doc, message", [
    ({"trivial": {"backend": "ollama", "model": "m"}}, "route_config: unknown tier 'trivial' (one of simple, medium, complex)"),
    ({"simple": {"backend": "bogus", "model": "m"}}, "route_config: tier 'simple': backend 'bogus' is not one of "
                                                     + ", ".join(BACKENDS)),
    ({"simple": {"backend": "ollama"}}, "route_config: tier 'simple': 'model' must be a non-empty string"),
    ({"simple": {"backend": "ollama", "model": "m", "cost_per_mtok": -1}},
     "route_config: tier 'simple': 'cost_per_mtok' must be a number >= 0, got -1"),
    ({"simple": {"backend": "ollama", "model": "m", "price": 1}}, "route_config: tier 'simple': unknown key 'price'"),
    ([1, 2], None),
])
def test_bad_route_config_is_refused_with_the_key_and_value(tmp_path: Path, doc: object, message: str | None) -> None:
    path = tmp_path / "routing.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as err:
        load_routing(str(path), BACKENDS)
    assert str(err.value) == (message or f"route_config: {str(path)!r} must hold a JSON object of tiers")


def test_pion_serve_with_an_unreadable_route_config_exits_with_status_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pion.proxy.main", "--route", "--route-config",
                           str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"pion-serve: route_config: cannot read {str(tmp_path / 'missing.json')!r}: "
                                   "No such file or directory")


# --- end to end: two OpenAI-compatible tiers behind pion-serve --route ---

@pytest.fixture(scope="module")
def cheap() -> Iterator[FakeBackend]:
    yield from running("openai")


@pytest.fixture(scope="module")
def strong() -> Iterator[FakeBackend]:
    yield from running("openai")


@pytest.fixture(scope="module")
def routed(shared_pion_server: ServerProcess, cheap: FakeBackend, strong: FakeBackend,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    tmp = tmp_path_factory.mktemp("route")
    config = tmp / "routing.json"
    config.write_text(json.dumps({
        "simple": {"backend": "vllm", "model": "cheap-model", "base_url": cheap.url, "cost_per_mtok": 0.5},
        "medium": {"backend": "llamacpp", "model": "mid-model", "base_url": strong.url, "cost_per_mtok": 3.0},
        "complex": {"backend": "openai", "model": "big-model", "base_url": strong.url, "cost_per_mtok": 10.0},
    }))
    p = start_proxy(tmp, "--backend", "vllm", "--backend-url", strong.url, "--route", "--route-config", str(config),
                    *pion_args(shared_pion_server))
    try:
        wait_for_embedder(p)
        yield p
    finally:
        p.stop()


def _ask(proxy: ProxyProcess, question: str, system: str = "route") -> tuple[str, dict]:
    completion = proxy.openai().chat.completions.create(
        model="client-model", messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    return completion.model or "", completion.model_extra["x_pion"]


def test_simple_and_complex_questions_reach_their_tier_backend_and_model(routed: ProxyProcess, cheap: FakeBackend,
                                                                        strong: FakeBackend) -> None:
    before = routed.stats()["intent_router"]
    calls = (cheap.state.calls, strong.state.calls)
    model, x = _ask(routed, "What is the capital of Italy?")
    assert (model, x["source"], x["route"]["tier"], x["route"]["backend"], x["route"]["model"]) == (
        "cheap-model", "full_inference", "simple", "vllm", "cheap-model")
    assert cheap.state.last_body["model"] == "cheap-model"
    model, x = _ask(routed, "Here is my code:\n```python\ndef f(x): return x / 0\n```\nWhy does it crash?")
    assert (model, x["route"]["tier"], x["route"]["heuristic_boost"], x["route"]["confidence"]) == (
        "big-model", "complex", "code", 1.0)
    assert (cheap.state.calls, strong.state.calls) == (calls[0] + 1, calls[1] + 1)
    after = routed.stats()["intent_router"]
    assert (after["simple"], after["complex"]) == (before["simple"] + 1, before["complex"] + 1)
    # the test servers report 12 total tokens per completion
    assert after["estimated_cost_usd"] == round(before["estimated_cost_usd"] + 12 * 0.5 / 1e6 + 12 * 10.0 / 1e6, 6)


def test_a_cache_hit_is_not_routed_or_counted(routed: ProxyProcess) -> None:
    _ask(routed, "How many legs does a spider have?", "route-hit")
    before = routed.stats()["intent_router"]
    _, x = _ask(routed, "How many legs does a spider have?", "route-hit")
    assert (x["source"], "route" in x) == ("l1_cache", False)
    assert routed.stats()["intent_router"]["classified_total"] == before["classified_total"]


def test_streamed_completion_is_routed_and_its_route_is_in_the_last_chunk(routed: ProxyProcess,
                                                                         cheap: FakeBackend) -> None:
    stream = routed.openai().chat.completions.create(
        model="client-model", stream=True,
        messages=[{"role": "system", "content": "route-stream"}, {"role": "user", "content": "What is the capital of Spain?"}])
    chunks = list(stream)
    x = [c.model_extra["x_pion"] for c in chunks if c.model_extra and "x_pion" in c.model_extra]
    assert [(e["route"]["tier"], e["route"]["model"]) for e in x] == [("simple", "cheap-model")]
    assert cheap.state.last_body["model"] == "cheap-model"


def test_stats_report_the_routing_table_and_percentages(routed: ProxyProcess) -> None:
    doc = routed.stats()["intent_router"]
    total = doc["classified_total"]
    assert total == doc["simple"] + doc["medium"] + doc["complex"]
    assert doc["simple_pct"] == round(100.0 * doc["simple"] / total, 1)
    assert doc["routing"]["complex"] == {"backend": "openai", "model": "big-model", "cost_per_mtok": 10.0,
                                         "base_url": doc["routing"]["complex"]["base_url"]}
    assert list(doc)[:10] == ["classified_total", "unclassified", "simple", "simple_pct", "medium", "medium_pct",
                              "complex", "complex_pct", "estimated_cost_usd", "tokens"]


def test_without_an_embedder_every_query_goes_to_medium(shared_pion_server: ServerProcess, strong: FakeBackend,
                                                        tmp_path: Path) -> None:
    config = tmp_path / "routing.json"
    config.write_text(json.dumps({t: {"backend": "vllm", "model": f"{t}-model", "base_url": strong.url}
                                  for t in ("simple", "medium", "complex")}))
    p = start_proxy(tmp_path, "--backend", "vllm", "--backend-url", strong.url, "--route", "--route-config",
                    str(config), "--embed-backend", "none", *pion_args(shared_pion_server))
    try:
        model, x = _ask(p, "What is the capital of Italy?")
        assert (model, x["route"]["tier"], x["route"]["heuristic_boost"]) == ("medium-model", "medium", "no_embedding")
        doc = p.stats()["intent_router"]
        assert (doc["unclassified"], doc["classified_total"]) == (1, 0)
    finally:
        p.stop()


@pytest.mark.slow
def test_route_sends_simple_questions_to_pion_llm_and_code_to_the_strong_tier(
        shared_pion_server: ServerProcess, strong: FakeBackend, tmp_path: Path) -> None:
    from support.llm_procs import MODEL, start_llm

    llm = start_llm(tmp_path / "llm", "--no-pion")
    try:
        config = tmp_path / "routing.json"
        config.write_text(json.dumps({
            "simple": {"backend": "pion", "model": MODEL, "base_url": llm.url, "cost_per_mtok": 0.0},
            "medium": {"backend": "pion", "model": MODEL, "base_url": llm.url, "cost_per_mtok": 0.0},
            "complex": {"backend": "vllm", "model": "big-model", "base_url": strong.url, "cost_per_mtok": 10.0}}))
        p = start_proxy(tmp_path, "--route", "--route-config", str(config), *pion_args(shared_pion_server))
        try:
            wait_for_embedder(p)
            completion = p.openai().chat.completions.create(
                model="any", max_tokens=8, messages=[{"role": "user", "content": "What is the capital of Italy?"}])
            x = completion.model_extra["x_pion"]
            assert (completion.model, x["route"]["tier"], x["route"]["backend"]) == (MODEL, "simple", "pion")
            assert completion.usage is not None and completion.usage.total_tokens > 0
            model, x = _ask(p, "SELECT name FROM users WHERE id = 3 -- why is this slow?", "route-llm")
            assert (model, x["route"]["tier"]) == ("big-model", "complex")
            doc = p.stats()["intent_router"]
            assert doc["tokens"]["simple"] == completion.usage.total_tokens
            assert doc["estimated_cost_usd"] == round(12 * 10.0 / 1e6, 6)
        finally:
            p.stop()
    finally:
        llm.stop()


def test_route_flags_and_environment_build_the_config() -> None:
    from pion.proxy.config import load_config

    config = load_config(["--route", "--route-config", "r.json", "--route-margin", "0.1"], env={})
    assert (config.route, config.route_config, config.route_margin) == (True, "r.json", 0.1)
    env = load_config([], env={"PION_SERVE_ROUTE": "1", "PION_SERVE_ROUTE_MARGIN": "0.2"})
    assert (env.route, env.route_margin) == (True, 0.2)
    with pytest.raises(ConfigError) as err:
        load_config(["--route-margin", "-0.1"], env={})
    assert str(err.value) == "route_margin: -0.1 is not in [0, 2)"
