"""Stage 2 for mlx-lm with the real SmolLM2: greedy completions over a prefix attended through
``install_pion_attention_patch`` equal vanilla mlx-lm's (a plain ``KVCache`` holding the same
fp32 prefix) on at least 19 of 20 prompts, in the in-process fast lane and over RESP.

Skipped where mlx-lm does not import; opt-in on Linux (``make test-mlx``), slow.
"""

from __future__ import annotations

from typing import Any

import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (the [mlx] extra)")

from client_prompts import SYSTEM_PROMPTS, system_turn, user_turn  # noqa: E402
from pion.client.runtimes.mlx_runtime import encode_prompt  # noqa: E402
from pion.client.runtimes.mlx_stage2 import PionRemoteKVCache  # noqa: E402
from pion.mlx import PionPromptCache, generate_ids, install_pion_attention_patch, make_pion_prompt_cache  # noqa: E402
from support.procs import ServerProcess  # noqa: E402

N_TOKENS = 8  # SmolLM2 on MLX's CPU backend: ~0.3 s a token here; 20 prompts x 2 runtimes
QUESTIONS = [
    "Hi!", "Who are you?", "Is my server down?", "How do I log in?", "What is DNS?", "Can I get a refund?",
    "Where is my invoice?", "How do I add a user?", "What is a VM?", "Why is it slow?", "Is there an API?",
    "What regions exist?", "How do backups work?", "Can I change plans?", "What is SSO?", "Is data encrypted?",
    "How do I delete data?", "What is uptime?", "Do you support IPv6?", "Thanks, bye!",
]


@pytest.fixture(scope="module")
def prefix(smollm_mlx: tuple[Any, Any]) -> list[int]:
    return encode_prompt(smollm_mlx[1], system_turn(SYSTEM_PROMPTS[0]))


def suffix(tok: Any, i: int) -> list[int]:
    return encode_prompt(tok, user_turn(QUESTIONS[i]))


@pytest.fixture(scope="module")
def vanilla(smollm_mlx: tuple[Any, Any], shared_pion_server: ServerProcess, prefix: list[int]) -> list[list[int]]:
    """Each prompt's greedy completion by plain mlx-lm from a ``KVCache`` holding the fp32 prefix."""
    model, tok = smollm_mlx
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port, tokenizer=tok) as pc:
        return [generate_ids(model, tok, suffix(tok, i), pc.get_or_prefill(prefix), N_TOKENS)
                for i in range(len(QUESTIONS))]


def test_the_in_process_fast_lane_matches_vanilla_mlx_lm_on_at_least_19_of_20_prompts(
        smollm_mlx: tuple[Any, Any], shared_pion_server: ServerProcess, prefix: list[int],
        vanilla: list[list[int]]) -> None:
    model, tok = smollm_mlx
    install_pion_attention_patch(model)
    same = 0
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port, tokenizer=tok, stage2=True,
                         stage2_lane="inproc") as pc:
        ns = pc.namespace_for(prefix, "stage2-inproc")
        for i in range(len(QUESTIONS)):
            cache = pc.get_or_prefill(prefix, namespace=ns)
            assert {type(c) for c in cache} == {PionRemoteKVCache}
            same += generate_ids(model, tok, suffix(tok, i), cache, N_TOKENS) == vanilla[i]
        stats = pc.stats()
    assert same >= 19
    assert (stats["misses"], stats["hits"], stats["stage2_wire_calls"]) == (1, 19, 0)
    assert stats["stage2_inproc_calls"] > 0


def test_the_resp_lane_matches_vanilla_mlx_lm(
        smollm_mlx: tuple[Any, Any], shared_pion_server: ServerProcess, prefix: list[int],
        vanilla: list[list[int]]) -> None:
    model, tok = smollm_mlx
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port, tokenizer=tok) as writer:
        ns = writer.namespace_for(prefix, "stage2-resp")
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port, tokenizer=tok, stage2=True) as pc:
        pc.get_or_prefill(prefix, namespace=ns)  # the miss: stores and pushes ATTEND.PREFIX.STORE
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port, tokenizer=tok, stage2=True,
                         stage2_lane="resp") as reader:
        same = [generate_ids(model, tok, suffix(tok, i), make_pion_prompt_cache(model, ns, reader, len(prefix)),
                             N_TOKENS) == vanilla[i] for i in range(3)]
        calls = reader.stats()["stage2_wire_calls"]
    assert same == [True, True, True]
    assert [len(v) for v in vanilla[:3]] == [N_TOKENS] * 3
    # one QUERY_FUSED per layer and forward; mlx-lm's generate_step runs a suffix as two forwards (all but
    # the last token, then the last) and computes one token ahead: N_TOKENS + 2 forwards per prompt
    assert calls == 3 * 30 * (N_TOKENS + 2)


def test_a_model_without_a_stage2_cache_runs_unchanged_after_the_patch(
        smollm_mlx: tuple[Any, Any], vanilla: list[list[int]], prefix: list[int]) -> None:
    model, tok = smollm_mlx
    install_pion_attention_patch()
    assert generate_ids(model, tok, prefix + suffix(tok, 0), None, N_TOKENS) == vanilla[0]


def test_make_pion_prompt_cache_refuses_a_cache_without_stage2(
        smollm_mlx: tuple[Any, Any], shared_pion_server: ServerProcess) -> None:
    model, tok = smollm_mlx
    with PionPromptCache(model, port=shared_pion_server.port) as pc, \
            pytest.raises(ValueError, match="needs a PionPromptCache created with stage2=True"):
        make_pion_prompt_cache(model, "ns", pc, 10)
