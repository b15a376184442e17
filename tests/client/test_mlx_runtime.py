"""The MLX runtime with the real SmolLM2 (mlx-lm on MLX's CPU backend here) and a real pion-server:
load_model(runtime="mlx"), hits and misses, a hit across processes, and sharing with the
transformers runtime in both directions.

Skipped where mlx-lm does not import; slow (it loads SmolLM2).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (the [mlx] extra)")

from client_prompts import QUESTIONS, SYSTEM_PROMPTS, system_turn, user_turn  # noqa: E402
from pion.client.runtimes import mlx_runtime  # noqa: E402
from pion.client.runtimes import transformers_runtime as hf  # noqa: E402
from pion.mlx import PionPromptCache, generate_ids  # noqa: E402
from support.procs import ServerProcess  # noqa: E402

N_TOKENS = 50


def prompt(tok: Any, i: int) -> tuple[list[int], list[int]]:
    return (mlx_runtime.encode_prompt(tok, system_turn(SYSTEM_PROMPTS[i])),
            mlx_runtime.encode_prompt(tok, user_turn(QUESTIONS[i])))


def mlx_agreement(model: Any, suffix: Sequence[int], cache: list[Any], reference: Sequence[int]) -> int:
    """How many leading tokens of a greedy ``reference`` one teacher-forced forward from ``cache`` reproduces."""
    logits = model(mx.array([list(suffix) + list(reference)]), cache=cache)[0]
    predicted = mx.argmax(logits[len(suffix) - 1:], axis=-1).tolist()
    return next((j for j, token in enumerate(reference) if predicted[j] != token), len(reference))


@pytest.fixture(scope="module")
def uncached_hf(smollm: tuple[Any, Any]) -> list[list[int]]:
    """Each prompt's 50-token greedy completion by the transformers runtime with no cache.

    The reference for mlx-lm too (same weights, same greedy tokens: the next test checks that on
    mlx-lm's own uncached completion), because SmolLM2 on MLX's CPU backend costs ~20 s per
    50 tokens here and the transformers runtime under a second.
    """
    model, tok = smollm
    return [hf.generate_ids(model, tok, sum(prompt(tok, i), []), max_tokens=N_TOKENS) for i in range(5)]


def test_load_model_with_runtime_mlx_gives_the_embedded_smollm2_with_its_real_rope(
        smollm_mlx: tuple[Any, Any]) -> None:
    model, tok = smollm_mlx
    assert model.args.rope_theta == 100000.0  # config.json's rope_parameters, which mlx-lm alone misses
    assert model.pion_model_id.startswith("smollm2-135m@") is True
    assert (len(model.layers), model.args.num_key_value_heads, model.args.head_dim) == (30, 3, 64)
    assert tok.decode(tok.encode("Paris", add_special_tokens=False)) == "Paris"


def test_load_model_refuses_an_unknown_runtime_and_a_device_for_mlx() -> None:
    from pion import load_model

    with pytest.raises(ValueError, match="unknown runtime 'jax'; expected one of transformers, mlx"):
        load_model(runtime="jax")
    with pytest.raises(ValueError, match="runtime='mlx' takes no device"):
        load_model(device="cpu", runtime="mlx")


def test_mlx_and_transformers_greedy_completions_are_the_same_without_a_cache(
        smollm_mlx: tuple[Any, Any], uncached_hf: list[list[int]]) -> None:
    model, tok = smollm_mlx
    assert generate_ids(model, tok, sum(prompt(tok, 0), []), max_tokens=N_TOKENS) == uncached_hf[0]


@pytest.mark.parametrize("fmt", ["fp16", "fp32", "mlx4g32"])
def test_a_hit_continues_exactly_like_the_miss_that_stored_it(
        smollm_mlx: tuple[Any, Any], shared_pion_server: ServerProcess, fmt: str) -> None:
    model, tok = smollm_mlx
    prefix, suffix = prompt(tok, 1)
    with PionPromptCache(model, vquant=fmt, port=shared_pion_server.port, tokenizer=tok) as pc:
        cold = pc.get_or_prefill(prefix)
        miss_ids = generate_ids(model, tok, suffix, cold, max_tokens=8)
        warm = pc.get_or_prefill(prefix)
        assert (pc.stats()["misses"], pc.stats()["hits"]) == (1, 1)
        kind = "QuantizedKVCache" if fmt == "mlx4g32" else "KVCache"
        assert {type(c).__name__ for c in warm} == {kind}
        assert generate_ids(model, tok, suffix, warm, max_tokens=8) == miss_ids


STORE_IN_ANOTHER_PROCESS = textwrap.dedent("""
    import sys
    from pion.mlx import PionPromptCache, load_model
    from pion.client.runtimes.mlx_runtime import encode_prompt
    model, tok = load_model()
    pc = PionPromptCache(model, vquant="fp16", port=int(sys.argv[1]), tokenizer=tok)
    pc.get_or_prefill(encode_prompt(tok, sys.argv[2]))
    print(pc.stats()["misses"], pc.stats()["bytes_stored"], pc.namespace_for(encode_prompt(tok, sys.argv[2])))
""")


def test_a_prefix_stored_by_another_mlx_process_is_a_hit_here_with_the_uncached_50_token_completion(
        smollm_mlx: tuple[Any, Any], shared_pion_server: ServerProcess, uncached_hf: list[list[int]]) -> None:
    model, tok = smollm_mlx
    prefix, suffix = prompt(tok, 2)
    out = subprocess.run([sys.executable, "-c", STORE_IN_ANOTHER_PROCESS, str(shared_pion_server.port),
                          system_turn(SYSTEM_PROMPTS[2])], capture_output=True, text=True, timeout=300, check=True)
    misses, nbytes, ns = out.stdout.split()
    # 30 layers x 2 sides x n tokens x 192 values x 2 bytes (fp16)
    assert (int(misses), int(nbytes)) == (1, 30 * 2 * len(prefix) * 192 * 2)
    with PionPromptCache(model, vquant="fp16", port=shared_pion_server.port, tokenizer=tok) as pc:
        assert pc.namespace_for(prefix) == ns
        cache = pc.get_or_prefill(prefix)
        assert (pc.stats()["hits"], pc.stats()["misses"]) == (1, 0)
        assert mlx_agreement(model, suffix, cache, uncached_hf[2]) == len(uncached_hf[2])


def test_an_unreachable_server_makes_the_cache_local_only(smollm_mlx: tuple[Any, Any]) -> None:
    from support.procs import free_port

    model, tok = smollm_mlx
    prefix, _ = prompt(tok, 0)
    with PionPromptCache(model, port=free_port(), tokenizer=tok) as pc:
        cache = pc.get_or_prefill(prefix)
        assert (pc.local_only, pc.stats()["misses"], cache[0].offset) == (True, 1, len(prefix))


def test_bad_arguments_are_refused(smollm_mlx: tuple[Any, Any], shared_pion_server: ServerProcess) -> None:
    model, tok = smollm_mlx
    with pytest.raises(ValueError, match="unknown"):
        PionPromptCache(model, vquant="fp5", port=shared_pion_server.port)
    with PionPromptCache(model, port=shared_pion_server.port) as pc, pytest.raises(ValueError, match="prefix_ids is empty"):
        pc.get_or_prefill([])
