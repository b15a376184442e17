"""Prefixes shared between the transformers and MLX runtimes through one pion-server, both ways.

Both keep K after RoPE in ``[N, H*D]`` rows, and ``mlx_runtime.mlx_fingerprint`` derives the same
namespace as the transformers runtime exactly when model identity, config, tokenizer, RoPE and
dtype match. Greedy 50-token completions from the other runtime's fp16 prefix must equal the
uncached completion on at least 4 of the 5 prompts (measured: 5 of 5).

Skipped where mlx-lm does not import; opt-in on Linux (``make test-mlx``), slow.
"""

from __future__ import annotations

from typing import Any

import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (the [mlx] extra)")

import pion  # noqa: E402
from client_prompts import QUESTIONS, SYSTEM_PROMPTS, greedy_agreement, system_turn, user_turn  # noqa: E402
from pion.client.runtimes import transformers_runtime as hf  # noqa: E402
from pion.client.runtimes.mlx_runtime import mlx_fingerprint  # noqa: E402
from pion.client.runtimes.model_files import resolve_model  # noqa: E402
from pion.mlx import PionPromptCache as MlxPromptCache  # noqa: E402
from support.procs import ServerProcess  # noqa: E402

N_TOKENS = 50


def prompt(tok: Any, i: int) -> tuple[list[int], list[int]]:
    return hf.encode_prompt(tok, system_turn(SYSTEM_PROMPTS[i])), hf.encode_prompt(tok, user_turn(QUESTIONS[i]))


def mlx_agreement(model: Any, suffix: list[int], cache: list[Any], reference: list[int]) -> int:
    """Leading tokens of a greedy ``reference`` that one teacher-forced mlx-lm forward from ``cache`` reproduces."""
    logits = model(mx.array([suffix + reference]), cache=cache)[0]
    predicted = mx.argmax(logits[len(suffix) - 1:], axis=-1).tolist()
    return next((j for j, token in enumerate(reference) if predicted[j] != token), len(reference))


@pytest.fixture(scope="module")
def uncached(smollm: tuple[Any, Any]) -> list[list[int]]:
    model, tok = smollm
    return [hf.generate_ids(model, tok, sum(prompt(tok, i), []), max_tokens=N_TOKENS) for i in range(5)]


def test_both_runtimes_derive_the_same_namespace_for_the_same_model(
        smollm: tuple[Any, Any], smollm_mlx: tuple[Any, Any], pion_server: ServerProcess) -> None:
    (model, tok), (mlx_model, mlx_tok) = smollm, smollm_mlx
    prefix, _ = prompt(tok, 0)
    with pion.PionPromptCache(model, port=pion_server.port, tokenizer=tok) as ours, \
            MlxPromptCache(mlx_model, port=pion_server.port, tokenizer=mlx_tok) as theirs:
        assert theirs.namespace_for(prefix) == ours.namespace_for(prefix)


def test_a_transformers_prefix_restores_into_mlx_lm_with_the_uncached_completion(
        smollm: tuple[Any, Any], smollm_mlx: tuple[Any, Any], pion_server: ServerProcess,
        uncached: list[list[int]]) -> None:
    (model, tok), (mlx_model, mlx_tok) = smollm, smollm_mlx
    identical = 0
    with pion.PionPromptCache(model, vquant="fp16", port=pion_server.port, tokenizer=tok) as writer, \
            MlxPromptCache(mlx_model, vquant="fp16", port=pion_server.port, tokenizer=mlx_tok) as reader:
        for i in range(5):
            prefix, suffix = prompt(tok, i)
            writer.get_or_prefill(prefix)
            cache = reader.get_or_prefill(prefix)
            identical += mlx_agreement(mlx_model, suffix, cache, uncached[i]) >= len(uncached[i])
        assert (writer.stats()["misses"], reader.stats()["hits"], reader.stats()["misses"]) == (5, 5, 0)
    assert identical >= 4
    assert identical == 5  # measured; the bar is 4 of 5


def test_an_mlx_prefix_restores_into_transformers_with_the_uncached_completion(
        smollm: tuple[Any, Any], smollm_mlx: tuple[Any, Any], pion_server: ServerProcess,
        uncached: list[list[int]]) -> None:
    (model, tok), (mlx_model, mlx_tok) = smollm, smollm_mlx
    identical = 0
    with MlxPromptCache(mlx_model, vquant="fp16", port=pion_server.port, tokenizer=mlx_tok) as writer, \
            pion.PionPromptCache(model, vquant="fp16", port=pion_server.port, tokenizer=tok) as reader:
        for i in range(5):
            prefix, suffix = prompt(tok, i)
            writer.get_or_prefill(prefix)
            cache = reader.get_or_prefill(prefix)
            agreed = greedy_agreement(model, suffix, cache, uncached[i], hf.eos_ids(model, tok), N_TOKENS)
            identical += agreed >= len(uncached[i])
        assert (writer.stats()["misses"], reader.stats()["hits"], reader.stats()["misses"]) == (5, 5, 0)
    assert identical >= 4
    assert identical == 5


def test_mlx_lm_running_another_rope_than_the_config_gets_its_own_namespaces(
        smollm: tuple[Any, Any], smollm_mlx: tuple[Any, Any]) -> None:
    """Plain ``mlx_lm.load`` misses transformers 5's ``rope_parameters`` (theta 10000, not 100000):
    the K it computes differ, so nothing may be shared with the transformers runtime."""
    import mlx_lm

    from pion.client.namespaces import model_fingerprint

    (model, tok), (mlx_model, mlx_tok) = smollm, smollm_mlx
    plain, plain_tok = mlx_lm.load(str(resolve_model(None).path), lazy=True)[:2]
    plain.pion_model_id, plain.pion_config = mlx_model.pion_model_id, mlx_model.pion_config
    assert plain.args.rope_theta == 10000
    hf_parts = model_fingerprint(model, tok)
    assert mlx_fingerprint(mlx_model, mlx_tok) == hf_parts
    mismatched = mlx_fingerprint(plain, plain_tok)
    assert [a == b for a, b in zip(mismatched, hf_parts, strict=True)] == [True, False, True, False, True]
    assert mismatched[3] == "rope=mlx:theta=10000.0,scaling=null,traditional=False"


def test_an_fp16_mlx_model_does_not_share_with_an_fp32_transformers_model(
        smollm: tuple[Any, Any], smollm_mlx: tuple[Any, Any]) -> None:
    from pion.client.namespaces import model_fingerprint

    (model, tok), (_, mlx_tok) = smollm, smollm_mlx
    half, _ = pion.load_model(dtype="float16", runtime="mlx")
    fp16_parts, hf_parts = mlx_fingerprint(half, mlx_tok), model_fingerprint(model, tok)
    assert (fp16_parts[4], hf_parts[4]) == ("dtype=torch.float16", "dtype=torch.float32")
    assert fp16_parts[:4] == hf_parts[:4]
