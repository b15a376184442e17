"""pion-llm ``--runtime mlx``: the same OpenAI server and segment chains on mlx-lm.

The config tests always run. The served-model tests need mlx-lm and, off Apple silicon,
``PION_TEST_MLX=1`` (``make test-mlx``: SmolLM2 on MLX's Linux CPU backend is slow); slow.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pion.common.errors import ConfigError
from pion.llm.config import load_config
from support.llm_procs import MODEL, LlmProcess, start_llm
from support.procs import ServerProcess

SYSTEM = "You are a support agent for Acme Cloud. Answer in one short sentence."


def test_runtime_defaults_to_transformers_and_accepts_mlx() -> None:
    assert (load_config([]).runtime, load_config(["--runtime", "mlx"]).runtime) == ("transformers", "mlx")


def test_an_unknown_runtime_and_mlx_with_a_device_are_refused() -> None:
    with pytest.raises(ConfigError, match="--runtime"):
        load_config(["--runtime", "jax"])
    with pytest.raises(ConfigError, match="--runtime mlx: takes no --device"):
        load_config(["--runtime", "mlx", "--device", "cpu"])


def _mlx_runs_here() -> bool:
    if importlib.util.find_spec("mlx_lm") is None:
        return False
    import mlx.core as mx

    return bool(mx.metal.is_available()) or os.environ.get("PION_TEST_MLX") == "1"


served = pytest.mark.skipif(not _mlx_runs_here(), reason="needs mlx-lm, and Metal or PION_TEST_MLX=1 (make test-mlx)")


@pytest.fixture(scope="module")
def mlx_llm(shared_pion_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmProcess]:
    llm = start_llm(tmp_path_factory.mktemp("llm-mlx"), "--runtime", "mlx", "--pion-port",
                    str(shared_pion_server.port), wait_s=300)
    try:
        yield llm
    finally:
        llm.stop()


def chat(llm: LlmProcess, question: str) -> Any:
    return llm.openai().chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        max_tokens=6, temperature=0)


@served
@pytest.mark.slow
def test_a_second_request_on_mlx_restores_the_system_prompt(mlx_llm: LlmProcess) -> None:
    first = chat(mlx_llm, "Where is my invoice?")
    second = chat(mlx_llm, "How do I change my email?")
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens > 10
    assert second.usage.completion_tokens == 6


@served
@pytest.mark.slow
def test_a_transformers_pion_llm_continues_a_chain_the_mlx_one_stored_with_the_same_answer(
        mlx_llm: LlmProcess, shared_pion_server: ServerProcess, tmp_path: Path) -> None:
    answer = chat(mlx_llm, "Can I get a refund?")
    hf_llm = start_llm(tmp_path, "--pion-port", str(shared_pion_server.port))
    try:
        again = chat(hf_llm, "Can I get a refund?")
    finally:
        hf_llm.stop()
    assert again.usage.prompt_tokens_details.cached_tokens > 10
    assert again.choices[0].message.content == answer.choices[0].message.content


@served
@pytest.mark.slow
def test_an_mlx_pion_llm_with_stage2_attends_the_system_prompt_in_pion_server_with_the_same_answer(
        mlx_llm: LlmProcess, shared_pion_server: ServerProcess, tmp_path: Path) -> None:
    stage2_llm = start_llm(tmp_path, "--runtime", "mlx", "--stage2", "--pion-port", str(shared_pion_server.port),
                           wait_s=300)
    try:
        chat(stage2_llm, "Is my server down?")
        remote = chat(stage2_llm, "What is DNS?")
    finally:
        stage2_llm.stop()
    local = chat(mlx_llm, "What is DNS?")  # stage 1: V.MFETCH of the same chain
    assert remote.usage.prompt_tokens_details.cached_tokens > 10
    assert remote.choices[0].message.content == local.choices[0].message.content
