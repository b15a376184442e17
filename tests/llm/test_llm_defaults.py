"""Sampling defaults for requests that omit temperature / top_p (pion.llm.defaults)."""

from __future__ import annotations

import pytest

from pion.common.errors import ConfigError
from transformers import GenerationConfig

from pion.llm.config import load_config
from pion.llm.defaults import (
    GenerationDefaults,
    generation_config_values,
    resolve_generation_defaults,
)
from pion.llm.schemas import ChatCompletionRequest

CARD = "SmolLM2 model card (huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct)"
EVAL = "pion eval, greedy beat the card's 0.2 on dev (docs/benchmarks.md)"


class _Model:
    """The one attribute ``generation_config_values`` reads from a transformers model."""

    def __init__(self, config: GenerationConfig) -> None:
        self.generation_config = config


def test_smollm2_gets_greedy_and_its_model_cards_top_p_when_its_generation_config_sets_none() -> None:
    assert resolve_generation_defaults("smollm2-135m", {}) == GenerationDefaults(0.0, 0.9, EVAL, CARD)


def test_the_models_generation_config_wins_over_the_table_value_by_value() -> None:
    got = resolve_generation_defaults("SmolLM2-135M-Instruct.Q4_1", {"temperature": 0.6})
    assert got == GenerationDefaults(0.6, 0.9, "the model's generation_config.json", CARD)


def test_command_line_flags_win_over_everything_and_each_value_falls_back_on_its_own() -> None:
    got = resolve_generation_defaults("smollm2-135m", {"temperature": 0.6, "top_p": 0.8}, temperature=0.0)
    assert got == GenerationDefaults(0.0, 0.8, "command line", "the model's generation_config.json")


def test_an_unknown_model_without_a_generation_config_gets_openais_defaults() -> None:
    assert resolve_generation_defaults("my-llama", {}) == GenerationDefaults(1.0, 1.0)


def test_only_values_the_generation_config_sets_explicitly_count() -> None:
    assert generation_config_values(_Model(GenerationConfig(bos_token_id=1, eos_token_id=2))) == {}
    assert generation_config_values(_Model(GenerationConfig(do_sample=True, temperature=0.6, top_p=0.95))) == {
        "temperature": 0.6, "top_p": 0.95}


def test_an_omitted_or_null_temperature_takes_the_default_and_a_sent_one_is_kept() -> None:
    defaults = GenerationDefaults(0.2, 0.9)
    msgs = [{"role": "user", "content": "hi"}]
    omitted = ChatCompletionRequest.model_validate({"model": "m", "messages": msgs}).sampling(defaults)
    nulls = ChatCompletionRequest.model_validate({"model": "m", "messages": msgs, "temperature": None,
                                                  "top_p": None}).sampling(defaults)
    sent = ChatCompletionRequest.model_validate({"model": "m", "messages": msgs, "temperature": 0,
                                                 "top_p": 1}).sampling(defaults)
    assert (omitted.temperature, omitted.top_p) == (0.2, 0.9)
    assert (nulls.temperature, nulls.top_p) == (0.2, 0.9)
    assert (sent.temperature, sent.top_p) == (0.0, 1.0)


def test_default_flags_and_env_are_parsed() -> None:
    cfg = load_config(["--default-temperature", "0", "--default-top-p", "0.5"])
    assert (cfg.default_temperature, cfg.default_top_p) == (0.0, 0.5)
    assert (load_config([]).default_temperature, load_config([]).default_top_p) == (None, None)


def test_env_sets_the_default_temperature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PION_LLM_DEFAULT_TEMPERATURE", "0.7")
    assert load_config([]).default_temperature == 0.7


@pytest.mark.parametrize("argv, message", [
    (["--default-temperature", "2.5"], "--default-temperature: must be in [0.0, 2.0], got '2.5'"),
    (["--default-temperature", "warm"], "--default-temperature: expected a number, got 'warm'"),
    (["--default-top-p", "0"], "--default-top-p: must be in (0.0, 1.0], got '0'"),
])
def test_bad_default_flags_stop_start_up_with_the_key_and_value(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:  # main() prints it and exits 2 (pion.common.options)
        load_config(argv)
    assert str(exc.value) == message
