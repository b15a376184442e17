"""pion-llm serves a hybrid model given by path (a tiny random Qwen3-Next saved to a temp dir)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.hybrid_models import tiny_config
from support.llm_procs import LlmProcess, start_llm


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random-weight GatedDeltaNet + attention model with SmolLM2's tokenizer (vocabulary sized to it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pion.client.runtimes.model_files import DEFAULT_MODEL, resolve_model

    directory = tmp_path_factory.mktemp("tiny-qwen3-next")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL).path, local_files_only=True)
    config = tiny_config("qwen3_next")
    config.vocab_size = len(tokenizer)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def llm(hybrid_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmProcess]:
    proc = start_llm(tmp_path_factory.mktemp("llm-logs"), "--model", str(hybrid_dir))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.slow
def test_a_hybrid_model_by_path_answers_completions_with_prefix_reuse_off(llm: LlmProcess,
                                                                          hybrid_dir: Path) -> None:
    from transformers import AutoTokenizer

    reply = llm.openai().completions.create(model=str(hybrid_dir), prompt="The capital of France is",
                                            max_tokens=5, temperature=0)
    n_prompt = len(AutoTokenizer.from_pretrained(hybrid_dir).encode("The capital of France is"))
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.choices[0].finish_reason) == (n_prompt, "length")
    assert reply.usage.completion_tokens == 5
    again = llm.openai().completions.create(model=str(hybrid_dir), prompt="The capital of France is",
                                            max_tokens=5, temperature=0)
    assert again.choices[0].text == reply.choices[0].text  # greedy, whole prompt prefilled each time
    assert "segment prefix reuse is off" in llm.log()


@pytest.mark.slow
def test_a_hybrid_model_answers_chat_completions(llm: LlmProcess, hybrid_dir: Path) -> None:
    reply = llm.openai().chat.completions.create(model=str(hybrid_dir), max_tokens=3, temperature=0,
                                                 messages=[{"role": "user", "content": "Hi"}])
    assert reply.usage is not None
    assert (reply.choices[0].message.role, reply.usage.completion_tokens) == ("assistant", 3)
