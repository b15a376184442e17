"""PionPromptCache with the real SmolLM2 and a real pion-server: hits, misses, fidelity, fallbacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from client_prompts import QUESTIONS, SYSTEM_PROMPTS, greedy_agreement, system_turn, user_turn
from pion import PionClient, PionPromptCache, generate
from pion.client.runtimes.transformers_runtime import cache_forward_kwargs, encode_prompt, eos_ids, forward_logits, generate_ids, prefill
from support.procs import ServerProcess, free_port

N_TOKENS = 50


def _prompt(tok: Any, i: int) -> tuple[list[int], list[int]]:
    return encode_prompt(tok, system_turn(SYSTEM_PROMPTS[i])), encode_prompt(tok, user_turn(QUESTIONS[i]))


@pytest.fixture(scope="module")
def uncached(smollm: tuple[Any, Any]) -> list[list[int]]:
    """The 50-token greedy completion of each of the 5 prompts without any cache."""
    model, tok = smollm
    return [generate_ids(model, tok, sum(_prompt(tok, i), []), max_tokens=N_TOKENS) for i in range(5)]


def _agreement(smollm: tuple[Any, Any], suffix: list[int], cache: Any, reference: list[int]) -> int:
    model, tok = smollm
    return greedy_agreement(model, suffix, cache, reference, eos_ids(model, tok), N_TOKENS)


def _identical(smollm: tuple[Any, Any], suffix: list[int], cache: Any, reference: list[int]) -> bool:
    return _agreement(smollm, suffix, cache, reference) >= len(reference)


def _same_layers(a: Any, b: Any) -> bool:
    return all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
               for x, y in zip(a.layers, b.layers, strict=True))


def test_fp32_warm_completion_is_identical_to_the_uncached_one(
        smollm: tuple[Any, Any], shared_pion_server: ServerProcess, uncached: list[list[int]]) -> None:
    model, tok = smollm
    prefix, suffix = _prompt(tok, 0)
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port, tokenizer=tok) as pc:
        ns = pc.namespace_for(prefix)
        cold = pc.get_or_prefill(prefix, namespace=ns)
        warm = pc.get_or_prefill(prefix, namespace=ns)
        assert (pc.stats()["misses"], pc.stats()["hits"]) == (1, 1)
        assert _same_layers(cold, warm) is True
        assert _identical(smollm, suffix, warm, uncached[0]) is True


def test_fp16_keeps_greedy_completions_on_at_least_four_of_five_prompts(
        smollm: tuple[Any, Any], shared_pion_server: ServerProcess, uncached: list[list[int]]) -> None:
    model, tok = smollm
    agreement = []
    with PionPromptCache(model, vquant="fp16", port=shared_pion_server.port, tokenizer=tok) as pc:
        for i in range(5):
            prefix, suffix = _prompt(tok, i)
            pc.get_or_prefill(prefix)  # miss: prefill, register, store
            warm = pc.get_or_prefill(prefix)
            agreement.append(_agreement(smollm, suffix, warm, uncached[i]))
        assert pc.stats()["hits"] == 5
    identical = [a >= len(u) for a, u in zip(agreement, uncached, strict=True)]
    assert [a >= 1 for a in agreement] == [True] * 5
    assert sum(identical) >= 4


def test_the_quick_start_reports_hits_misses_and_times(smollm: tuple[Any, Any],
                                                     shared_pion_server: ServerProcess) -> None:
    model, tok = smollm
    system = "You are a support agent for Acme. Answer in one sentence."
    pc = PionPromptCache(model, vquant="fp16", port=shared_pion_server.port)
    ns = PionPromptCache.make_namespace("smollm2-135m", "fp16", system, "quick-start-test")
    for _ in range(2):
        cache = pc.get_or_prefill(tok.encode(system), namespace=ns)
        text = generate(model, tok, prompt=tok.encode(" How do I reset my password?", add_special_tokens=False),
                        prompt_cache=cache, max_tokens=8)
        assert isinstance(text, str)
    stats = pc.stats()
    pc.close()
    assert (stats["hits"], stats["misses"], stats["hit_rate"]) == (1, 1, 0.5)
    assert stats["fetch_ms_total"] > 0.0
    assert stats["store_ms_total"] > 0.0
    assert stats["bytes_fetched"] == stats["bytes_stored"]


def test_a_restored_cache_works_with_transformers_generate(smollm: tuple[Any, Any],
                                                           shared_pion_server: ServerProcess,
                                                           uncached: list[list[int]]) -> None:
    model, tok = smollm
    prefix, suffix = _prompt(tok, 2)
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port) as pc:
        pc.get_or_prefill(prefix)
        warm = pc.get_or_prefill(prefix)
    ids = torch.tensor([prefix + suffix])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                         **cache_forward_kwargs(model, warm))
    assert out[0, len(prefix) + len(suffix):].tolist() == uncached[2][:10]


def test_the_prefix_registers_its_block_table_and_layer_count(smollm: tuple[Any, Any],
                                                               shared_pion_server: ServerProcess) -> None:
    model, tok = smollm
    prefix = encode_prompt(tok, system_turn(" ".join(SYSTEM_PROMPTS * 2)))
    with PionPromptCache(model, port=shared_pion_server.port) as pc:
        ns = pc.namespace_for(prefix)
        pc.get_or_prefill(prefix)
        table = PionClient(port=shared_pion_server.port).kv_prefix_blocks(ns)
    assert len(prefix) >= 128
    assert (table.block_size, len(table.hashes)) == (64, len(prefix) // 64)


_CROSS_INSTANCE_READER = """
import json, sys
import torch
from pion import PionPromptCache, load_model
from pion.client.runtimes.transformers_runtime import generate_ids
port, ns, prefix, suffix = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
torch.set_num_threads(1)
model, tok = load_model(device="cpu")
pc = PionPromptCache(model, vquant="fp32", port=port)
hit_before = pc.lookup(ns)
cache = pc.get_or_prefill(prefix, namespace=ns)
print(json.dumps({"hit_before": hit_before, "stats": pc.stats(),
                  "ids": generate_ids(model, tok, suffix, prompt_cache=cache, max_tokens=50)}))
"""


def test_a_second_process_hits_and_reproduces_the_first_process_completion(
        smollm: tuple[Any, Any], shared_pion_server: ServerProcess, uncached: list[list[int]]) -> None:
    model, tok = smollm
    prefix, suffix = _prompt(tok, 4)
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port) as pc:
        ns = pc.namespace_for(prefix, "cross-instance")
        # The first process's completion from its own prefill is the uncached one.
        assert _identical(smollm, suffix, pc.get_or_prefill(prefix, ns), uncached[4]) is True
        first = uncached[4]
        assert pc.stats()["misses"] == 1
    proc = subprocess.run([sys.executable, "-c", _CROSS_INSTANCE_READER, str(shared_pion_server.port), ns,
                           json.dumps(prefix), json.dumps(suffix)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    second = json.loads(proc.stdout.strip().splitlines()[-1])
    assert second["hit_before"] is True
    assert (second["stats"]["hits"], second["stats"]["misses"], second["stats"]["prefill_ms_total"]) == (1, 0, 0.0)
    assert second["ids"] == first


class _EvictAfterLookup(PionClient):
    """A real client whose LOOKUP is followed, before any fetch, by a real KV.PREFIX.DROP from elsewhere."""

    def kv_prefix_lookup(self, ns: Any, **kwargs: Any) -> Any:
        hit = super().kv_prefix_lookup(ns, **kwargs)
        with PionClient(port=self.redis.connection_pool.connection_kwargs["port"]) as other:
            other.kv_prefix_drop(ns)
        return hit


def test_a_prefix_evicted_between_lookup_and_fetch_falls_back_to_local_prefill(
        smollm: tuple[Any, Any], shared_pion_server: ServerProcess, caplog: pytest.LogCaptureFixture) -> None:
    model, tok = smollm
    prefix, _ = _prompt(tok, 1)
    with PionPromptCache(model, port=shared_pion_server.port) as seed:
        ns = seed.namespace_for(prefix, "evicted")
        seed.get_or_prefill(prefix, ns)
        assert seed.lookup(ns) is True
    with PionPromptCache(model, client=_EvictAfterLookup(port=shared_pion_server.port)) as pc:
        with caplog.at_level("WARNING", logger="pion.client.prompt_cache"):
            cache = pc.get_or_prefill(prefix, ns)
        assert _same_layers(cache, prefill(model, prefix)) is True
        assert (pc.stats()["fallbacks"], pc.stats()["hits"], pc.stats()["misses"]) == (1, 0, 1)
        assert "prefilling locally" in caplog.text
        assert pc.lookup(ns) is True  # the fallback stored the prefix again


class _KillServerAfterLookup(PionClient):
    """A real client whose server process dies right after answering LOOKUP."""

    server: ServerProcess

    def kv_prefix_lookup(self, ns: Any, **kwargs: Any) -> Any:
        hit = super().kv_prefix_lookup(ns, **kwargs)
        self.server.stop(signal.SIGKILL)
        return hit


def test_a_server_dying_mid_restore_falls_back_and_later_calls_stay_local(
        smollm: tuple[Any, Any], pion_server: ServerProcess, caplog: pytest.LogCaptureFixture) -> None:
    model, tok = smollm
    prefix, _ = _prompt(tok, 3)
    with PionPromptCache(model, port=pion_server.port) as seed:
        seed.get_or_prefill(prefix)
    client = _KillServerAfterLookup(port=pion_server.port)
    client.server = pion_server
    with PionPromptCache(model, client=client) as pc, caplog.at_level("WARNING", logger="pion.client.prompt_cache"):
        cache = pc.get_or_prefill(prefix)
        assert pion_server.proc.poll() is not None
        assert _same_layers(cache, prefill(model, prefix)) is True
        again = pc.get_or_prefill(prefix)
        assert again.get_seq_length() == len(prefix)
        assert pc.stats()["fallbacks"] == 2
    assert "restoring prefix" in caplog.text


def test_a_server_down_at_construction_makes_the_cache_local_only(
        smollm: tuple[Any, Any], caplog: pytest.LogCaptureFixture) -> None:
    model, tok = smollm
    prefix, _ = _prompt(tok, 0)
    with caplog.at_level("WARNING", logger="pion.client.prompt_cache"):
        pc = PionPromptCache(model, port=free_port())
    assert pc.local_only is True
    assert "local-only" in caplog.text
    assert _same_layers(pc.get_or_prefill(prefix), prefill(model, prefix)) is True
    assert pc.lookup("anything") is False


def test_an_empty_prefix_is_refused(smollm: tuple[Any, Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        pc = PionPromptCache(smollm[0], port=free_port())
    with pytest.raises(ValueError, match="empty"):
        pc.get_or_prefill([])


def test_an_unknown_format_is_refused_at_construction(smollm: tuple[Any, Any]) -> None:
    with pytest.raises(ValueError, match="unknown format"):
        PionPromptCache(smollm[0], vquant="fp7", port=free_port())


def _next_token_logprobs(model: Any, suffix: Sequence[int], cache: Any) -> torch.Tensor:
    return torch.log_softmax(forward_logits(model, suffix, cache)[0], dim=-1)


@pytest.fixture(scope="module")
def reference_logprobs(smollm: tuple[Any, Any]) -> list[torch.Tensor]:
    """Next-token log-probabilities after each prompt, from a local fp32 prefill."""
    model, tok = smollm
    return [_next_token_logprobs(model, _prompt(tok, i)[1], prefill(model, _prompt(tok, i)[0])) for i in range(5)]


@pytest.mark.parametrize(("vquant", "boundary_protect"), [("int8", 0), ("turbo4", 0), ("mlx4g32", 0), ("fp8", 2)])
def test_quantized_formats_keep_the_next_token_distribution(
        smollm: tuple[Any, Any], shared_pion_server: ServerProcess, reference_logprobs: list[torch.Tensor],
        vquant: str, boundary_protect: int) -> None:
    model, tok = smollm
    agree, kls = 0, []
    with PionPromptCache(model, vquant=vquant, boundary_protect=boundary_protect,
                         port=shared_pion_server.port) as pc:
        for i in range(5):
            prefix, suffix = _prompt(tok, i)
            pc.get_or_prefill(prefix)
            warm = pc.get_or_prefill(prefix)
            ref = reference_logprobs[i]
            got = _next_token_logprobs(model, suffix, warm)
            agree += int(torch.argmax(ref) == torch.argmax(got))
            kls.append(float(torch.sum(ref.exp() * (ref - got))))
        assert pc.stats()["hits"] == 5
    assert agree >= 4
    assert max(kls) < 0.5


def test_server_decoded_f16_and_client_decoded_raw_restores_agree(
        smollm: tuple[Any, Any], shared_pion_server: ServerProcess) -> None:
    model, tok = smollm
    prefix, suffix = _prompt(tok, 0)
    logprobs = {}
    for restore_dtype in ("raw", "f16"):
        with PionPromptCache(model, vquant="turbo4", port=shared_pion_server.port,
                             restore_dtype=restore_dtype) as pc:  # type: ignore[arg-type]
            ns = pc.namespace_for(prefix, "restore-dtype")
            pc.get_or_prefill(prefix, ns)  # raw: miss and store; f16: already a hit
            warm = pc.get_or_prefill(prefix, ns)
            assert pc.stats()["hits"] == (1 if restore_dtype == "raw" else 2)
            logprobs[restore_dtype] = _next_token_logprobs(model, suffix, warm)
    assert int(torch.argmax(logprobs["raw"])) == int(torch.argmax(logprobs["f16"]))
    assert float(torch.max(torch.abs(logprobs["raw"].exp() - logprobs["f16"].exp()))) < 0.01


def test_store_shares_the_prefix_part_of_a_cache_computed_with_its_suffix(
        smollm: tuple[Any, Any], shared_pion_server: ServerProcess) -> None:
    model, tok = smollm
    prefix, suffix = _prompt(tok, 3)
    full = prefill(model, prefix + suffix)
    with PionPromptCache(model, vquant="fp32", port=shared_pion_server.port) as pc:
        ns = pc.namespace_for(prefix, "store-api")
        assert pc.store(prefix, full, namespace=ns, prefill_ms=12.0) is True
        warm = pc.get_or_prefill(prefix, namespace=ns)
        assert (pc.stats()["hits"], pc.stats()["misses"]) == (1, 0)
    assert warm.get_seq_length() == len(prefix)
    assert torch.equal(warm.layers[5].keys, full.layers[5].keys[:, :, :len(prefix)]) is True
