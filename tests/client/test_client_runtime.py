"""The transformers runtime: load_model, generate and stream_generate on the real SmolLM2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from client_prompts import QUESTIONS, SYSTEM_PROMPTS, system_turn, user_turn
from pion import generate, load_model, stream_generate
from pion.client.runtimes.transformers_kv import KvShape, RestoredKv, layer_rows
from pion.client.runtimes.transformers_runtime import _sample, encode_prompt, forward_logits, generate_ids, prefill


def test_smollm2_has_the_documented_kv_geometry(smollm: tuple[Any, Any]) -> None:
    model, _ = smollm
    assert KvShape.from_config(model.config) == KvShape(n_layers=30, n_kv_heads=3, head_dim=64)
    assert KvShape.from_config(model.config).kv_dim == 192


def test_greedy_generation_is_deterministic_and_answers(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    first = generate(model, tok, prompt, max_tokens=12)
    assert first == generate(model, tok, prompt, max_tokens=12)
    assert "Paris" in first


def test_stream_pieces_join_to_the_generated_text(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    prompt = system_turn(SYSTEM_PROMPTS[0]) + user_turn(QUESTIONS[0])
    pieces = list(stream_generate(model, tok, prompt, max_tokens=20))
    assert "".join(pieces) == generate(model, tok, prompt, max_tokens=20)
    assert len(pieces) > 1


def test_prompt_cache_makes_the_prompt_a_suffix(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    prefix = encode_prompt(tok, system_turn(SYSTEM_PROMPTS[1]))
    suffix = encode_prompt(tok, user_turn(QUESTIONS[1]))
    cached = generate_ids(model, tok, suffix, prompt_cache=prefill(model, prefix), max_tokens=20)
    assert cached == generate_ids(model, tok, prefix + suffix, max_tokens=20)


def test_a_stop_string_ends_generation_and_is_not_returned(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    prompt = system_turn(SYSTEM_PROMPTS[3]) + user_turn(QUESTIONS[3])
    full = generate(model, tok, prompt, max_tokens=30)
    stop = full.split()[4]
    cut = generate(model, tok, prompt, max_tokens=30, stop=stop)
    assert cut == full[:full.index(stop)]


def test_seeded_sampling_is_reproducible(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    prompt = user_turn("Tell me a fun fact.")
    a = generate(model, tok, prompt, max_tokens=15, temperature=0.9, top_p=0.9, seed=7)
    assert a == generate(model, tok, prompt, max_tokens=15, temperature=0.9, top_p=0.9, seed=7)


def test_cache_rows_round_trip_through_restore_buffers(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    ids = encode_prompt(tok, system_turn(SYSTEM_PROMPTS[2]))
    cache = prefill(model, ids)
    shape = KvShape.from_config(model.config)
    restored = RestoredKv(shape, len(ids))
    for layer in range(shape.n_layers):
        for side in ("k", "v"):
            rows = torch.from_numpy(layer_rows(cache, layer, side, len(ids), torch.float32))
            restored.set_layer(side, layer, rows.reshape(-1))
    for materialize in (False, True):
        rebuilt = restored.to_cache(model.config, torch.device("cpu"), torch.float32, materialize=materialize)
        assert rebuilt.get_seq_length() == len(ids)
        assert all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
                   for a, b in zip(cache.layers, rebuilt.layers, strict=True))


def test_a_lazily_converted_fp16_cache_gives_the_same_logits_as_a_materialized_one(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    prefix = encode_prompt(tok, system_turn(SYSTEM_PROMPTS[4]))
    suffix = encode_prompt(tok, user_turn(QUESTIONS[4]))
    cache = prefill(model, prefix)
    shape = KvShape.from_config(model.config)
    restored = RestoredKv(shape, len(prefix))
    for layer in range(shape.n_layers):
        for side in ("k", "v"):
            rows = torch.from_numpy(layer_rows(cache, layer, side, len(prefix), torch.float16))
            restored.set_layer(side, layer, rows.reshape(-1))
    lazy = forward_logits(model, suffix, restored.to_cache(model.config, torch.device("cpu")))[0]
    eager = forward_logits(model, suffix, restored.to_cache(model.config, torch.device("cpu"), materialize=True))[0]
    assert torch.equal(lazy, eager) is True


def test_an_empty_prompt_is_refused(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    with pytest.raises(ValueError, match="prompt is empty"):
        generate(model, tok, [], max_tokens=5)


def test_an_unknown_model_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="neither"):
        load_model(str(tmp_path / "missing"))


def test_a_converted_model_directory_loads_with_its_identity(smollm: tuple[Any, Any]) -> None:
    model, _ = smollm
    again, _ = load_model(model.name_or_path, device="cpu")
    assert again.pion_model_id == model.pion_model_id


@pytest.mark.parametrize("temperature", [1e-30, 5e-324, 1e-8])
def test_a_tiny_temperature_samples_the_top_token_instead_of_failing(temperature: float) -> None:
    logits = torch.tensor([1.0, 30.0, -2.0, float("-inf")])
    generator = torch.Generator().manual_seed(0)
    assert [_sample(logits, temperature, top_p, generator) for top_p in (1.0, 0.5)] == [1, 1]


@pytest.mark.parametrize("top_p", [1e-320, 1e-45, 1e-3])
def test_a_tiny_top_p_keeps_the_top_token_instead_of_failing(top_p: float) -> None:
    logits = torch.tensor([1.0, 30.0, -2.0, float("-inf")])
    assert _sample(logits, 1.0, top_p, torch.Generator().manual_seed(0)) == 1
