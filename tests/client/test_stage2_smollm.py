"""Stage 2 end to end on the real SmolLM2 (slow): another process prefills and pushes five system
prompts; this process, which never saw them, answers 20 prompts with prefix attention served by
pion-server — over RESP and over the binary lane — and its 50-token greedy completions must equal
the uncached model's on at least 19 of 20. Plus the in-process lane in the writing process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from client_prompts import QUESTIONS, SYSTEM_PROMPTS, greedy_agreement, system_turn, user_turn
from pion import PionPromptCache, make_pion_prompt_cache
from pion.client.runtimes.transformers_runtime import eos_ids, generate_ids
from support.procs import ServerProcess

pytestmark = pytest.mark.slow
MAX_TOKENS = 50
# 20 prompts: every system prompt with four of the questions.
PAIRS = [(s, q) for s in range(len(SYSTEM_PROMPTS)) for q in range(len(QUESTIONS)) if q != s][:20]

_WRITER = """
import json, sys
import torch
from pion import PionPromptCache, load_model
port, prefixes = int(sys.argv[1]), json.loads(sys.argv[2])
torch.set_num_threads(1)
model, tok = load_model(device="cpu")
with PionPromptCache(model, vquant="fp32", port=port, stage2=True) as pc:
    for ns, ids in prefixes.items():
        pc.get_or_prefill(ids, namespace=ns)
    print(json.dumps(pc.stats()))
"""


def encode(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def prompts(smollm: tuple[Any, Any]) -> dict[str, Any]:
    model, tok = smollm
    prefixes = {f"stage2-smollm-{i}": encode(tok, system_turn(text)) for i, text in enumerate(SYSTEM_PROMPTS)}
    suffixes = [encode(tok, user_turn(QUESTIONS[q])) for _, q in PAIRS]
    references = [generate_ids(model, tok, prefixes[f"stage2-smollm-{s}"] + suffixes[i], max_tokens=MAX_TOKENS)
                  for i, (s, _) in enumerate(PAIRS)]
    return {"prefixes": prefixes, "suffixes": suffixes, "references": references}


@pytest.fixture(scope="module")
def pushed(prompts: dict[str, Any], shared_pion_server: ServerProcess) -> dict[str, Any]:
    """The five prefixes prefilled and pushed by a separate process."""
    proc = subprocess.run([sys.executable, "-c", _WRITER, str(shared_pion_server.port), json.dumps(prompts["prefixes"])],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    stats: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return stats


@pytest.mark.parametrize("lane", ["resp", "binary"])
def test_stage2_completions_from_another_process_equal_the_uncached_model(
        smollm: tuple[Any, Any], prompts: dict[str, Any], pushed: dict[str, Any], shared_pion_server: ServerProcess,
        lane: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = smollm
    assert (pushed["misses"], pushed["store_failures"]) == (5, 0)
    monkeypatch.setenv("PION_PROMPT_CACHE_NO_INPROC", "1")
    identical = 0
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port, stage2=True, stage2_lane=lane) as pc:
        for i, (s, _) in enumerate(PAIRS):
            ns = f"stage2-smollm-{s}"
            prefix = prompts["prefixes"][ns]
            pc.get_or_prefill(prefix, namespace=ns)
            cache = make_pion_prompt_cache(model, ns, pc, len(prefix))
            agreed = greedy_agreement(model, prompts["suffixes"][i], cache, prompts["references"][i],
                                      eos_ids(model, tok), MAX_TOKENS)
            identical += agreed >= len(prompts["references"][i])
        stats = pc.stats()
        assert (stats["hits"], stats["misses"], stats["prefill_ms_total"]) == (20, 0, 0.0)
        assert (pc.stage2._binary is not None) == (lane == "binary")
        assert pc.stage2.counters.inproc_calls == 0
    assert identical >= 19


def test_stage2_decoding_step_by_step_in_the_writing_process_equals_the_uncached_model(
        smollm: tuple[Any, Any], prompts: dict[str, Any], shared_pion_server: ServerProcess) -> None:
    model, tok = smollm
    identical = 0
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port, stage2=True) as pc:
        for i, (s, _) in enumerate(PAIRS[:4]):
            prefix = prompts["prefixes"][f"stage2-smollm-{s}"]
            cache = pc.get_or_prefill(prefix, namespace=f"stage2-inproc-{s}")
            got = generate_ids(model, tok, prompts["suffixes"][i], prompt_cache=cache, max_tokens=MAX_TOKENS)
            identical += got == prompts["references"][i]
        assert pc.stage2.counters.wire_calls == 0
    assert identical >= 4
