"""Fixtures shared by every test package."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.procs import ServerProcess, start_server

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# pion-serve's default verifier is ``cross`` (issue 18, sixth round). Every pion-serve a test
# starts (directly or through ``pion up``) inherits this and checks hits with the guard,
# which is what the proxy, distill, routing and stack tests were written against and which
# decides from the first request (a model verifier lets the guard decide until its models
# have loaded, seconds after start: a test's verdicts would depend on timing). Tests of the
# model verifiers pass ``--verifier``; tests/proxy/test_default_verifier_e2e.py removes this
# variable to check the real default.
os.environ.setdefault("PION_SERVE_VERIFIER", "guard")

TESTS_DIR = Path(__file__).resolve().parent
# Fixtures that load SmolLM2 in this process; a test using one (directly or through another
# fixture) is slow. Tests that start pion-llm or make the server load MiniLM carry an explicit
# @pytest.mark.slow / module ``pytestmark`` instead.
MODEL_FIXTURES = frozenset({"smollm", "smollm_mlx"})
# Module fixtures that load MiniLM, here or in the shared pion-server their proxy waits for: slow too.
EMBEDDER_FIXTURES = frozenset({"minilm", "distilled", "rag_proxy", "routed", "learned_verifier", "trained",
                               "learned_proxy", "cross_verifier"})
# Packages whose tests need only the core dependencies (numpy/hiredis/uvloop/redis/ml_dtypes/
# crc32c + the test tools): their tests that are not slow are marked ``core`` (make test-core).
CORE_PACKAGES = frozenset({"server", "persist", "crash", "codecs", "common"})
# Test modules that are long workloads by design: they stay in `make test` (and, where core, in
# `make test-core`) but not in the developer's `make test-fast` (< 2 min). Each says why.
LONG_WORKLOAD_MODULES = {
    "server/test_fuzz_commands.py": "hypothesis fuzzing of every command",
    "server/test_fuzz_framing.py": "hypothesis fuzzing of RESP frames and splits",
    "server/test_fuzz_attend.py": "hypothesis fuzzing of ATTEND.PREFIX.* (torch kernels)",
    "server/test_search_fuzz.py": "hypothesis fuzzing of FT.* against an oracle",
    "crash/test_kill9.py": "kill -9 under concurrent writers, then recovery",
    "crash/test_kill9_batched.py": "kill -9 under pipelined writers, then recovery",
    "server/test_workers_lifecycle.py": "N worker processes started, killed and restarted",
    "server/test_workers_pipeline.py": "worker processes and 2,500-command forwarded pipelines",
    "server/test_workers_binary_lane.py": "worker processes, each with its own binary lane",
    "server/test_tenant_workers.py": "the tenant checks again through every worker process",
    "server/test_metrics_workers.py": "worker processes scraped through one /metrics endpoint",
    "server/test_cold_tier.py": "a six-node Redis Cluster and two pion-server fronts",
    "server/test_attend_cold_tier.py": "a Redis Cluster, two fronts, ATTEND's torch kernels and a restart",
    "client/test_stage2_cold_tier.py": "a Redis Cluster, two fronts and a Llama model through Stage 2",
    "client/test_hybrid_prompt_cache.py": "builds and runs four hybrid (SSM) transformers models",
    "client/test_stage2_tiny_llama.py": "runs a Llama model through every Stage-2 lane",
    "integrations/test_lmcache_chunks.py": "LMCache-shaped multi-megabyte chunk traffic",
    "server/test_compiled_build.py": "builds and runs a mypyc-compiled copy of the tree",
    "server/test_server_core_install.py": "servers in an interpreter with the extras hidden",
    "llm/test_pion_up_orphans.py": "the whole `pion up` process tree, killed in several ways",
    "client/test_mlx_torch_free.py": "a subprocess importing mlx-lm and running three tiny models",
    "llm/test_llm_mlx_stage2.py": "a tiny mlx-lm Llama through pion-llm's engine and Stage-2 lane",
}
# ATTEND.PREFIX.* runs torch kernels (the [runtime] extra): on a core install its test modules
# are not collected, and tests/server/test_server_core_install.py checks the -ERR it answers.
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob = ["server/test_attend_*.py", "server/test_binary_lane.py",
                           "server/test_workers_binary_lane.py", "server/test_fuzz_attend.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Derive the ``slow`` and ``core`` markers from fixtures and location (one rule, one place)."""
    for item in items:
        if (MODEL_FIXTURES | EMBEDDER_FIXTURES).intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        relative = item.path.relative_to(TESTS_DIR)
        if relative.parts[0] in CORE_PACKAGES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.core)
        if relative.as_posix() in LONG_WORKLOAD_MODULES:
            item.add_marker(pytest.mark.slow)  # after ``core``: a long core test is still core


@pytest.fixture
def pion_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh pion-server on a free port with its own data directory."""
    server = start_server(tmp_path / "pion-data")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def shared_pion_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One pion-server for a whole test module (tests must use distinct keys)."""
    server = start_server(tmp_path_factory.mktemp("pion-data"))
    try:
        yield server
    finally:
        server.stop()
