"""Stage 2 on a tiny random Llama with GQA 4:2 against a real pion-server: the ``"pion"`` attention
over a remote prefix gives the same logits and greedy tokens as dense sdpa over the whole prompt,
on every lane (in-process, RESP, binary), through decode steps and a cold-tier rehydrate."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pion import PionPromptCache, install_pion_attention_patch, make_pion_prompt_cache
from pion.client.runtimes.transformers_runtime import generate_ids
from support.procs import ServerProcess
from support.tiny_llama import dense_suffix_logits, logits, max_err, tiny_llama

PREFIX = list(range(3, 43))  # 40 tokens
SUFFIX = [50, 51, 52, 53, 54, 55]


class _IdTokenizer:
    """Just enough tokenizer for ``generate_ids`` over token ids (no EOS, ids decode to text)."""

    eos_token_id = None

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(i) for i in ids)


@pytest.fixture(scope="module")
def tiny() -> Any:
    return tiny_llama("tiny-llama-gqa", without_eos=True)


@pytest.fixture(autouse=True)
def sdpa_first(tiny: Any) -> Iterator[None]:
    tiny.set_attn_implementation("sdpa")
    yield
    tiny.set_attn_implementation("sdpa")




def test_pion_attention_without_a_stage2_cache_falls_through_to_sdpa(tiny: Any) -> None:
    want = logits(tiny, PREFIX)
    install_pion_attention_patch(tiny)
    assert tiny.config._attn_implementation == "pion"
    assert max_err(logits(tiny, PREFIX), want) < 1e-6


@pytest.mark.parametrize("lane", ["inproc", "resp", "binary"])
def test_stage2_suffix_logits_equal_dense_attention_on_every_lane(tiny: Any, shared_pion_server: ServerProcess,
                                                                  lane: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want = dense_suffix_logits(tiny, PREFIX, SUFFIX)
    ns = f"tiny-{lane}"
    writer = PionPromptCache(tiny, vquant="fp32", port=shared_pion_server.port, stage2=True)
    cache = writer.get_or_prefill(PREFIX, namespace=ns)
    if lane != "inproc":  # a second client, as another process would be: it must go over the wire
        monkeypatch.setenv("PION_PROMPT_CACHE_NO_INPROC", "1")
        reader = PionPromptCache(tiny, vquant="fp32", port=shared_pion_server.port, stage2=True, stage2_lane=lane)
        assert reader.lookup(ns) is True
        reader.get_or_prefill(PREFIX, namespace=ns)
        cache = make_pion_prompt_cache(tiny, ns, reader, len(PREFIX))
        assert reader.stats()["hits"] == 1
    assert cache.get_seq_length() == len(PREFIX)
    got = logits(tiny, SUFFIX, cache)
    assert max_err(got, want) < 1e-4
    assert cache.get_seq_length() == len(PREFIX) + len(SUFFIX)
    used = reader if lane != "inproc" else writer
    counters = used.stage2.counters
    assert (counters.inproc_calls > 0, counters.wire_calls > 0) == (lane == "inproc", lane != "inproc")
    assert (used.stage2._binary is not None) == (lane == "binary")
    writer.close()
    used.close()


@pytest.mark.parametrize("lane", ["inproc", "resp", "binary"])
def test_stage2_greedy_decoding_equals_the_uncached_model(tiny: Any, shared_pion_server: ServerProcess, lane: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tok = _IdTokenizer()
    want = generate_ids(tiny, tok, PREFIX + SUFFIX, max_tokens=12)
    ns = f"tiny-gen-{lane}"
    with PionPromptCache(tiny, vquant="fp32", port=shared_pion_server.port, stage2=True) as writer:
        cache = writer.get_or_prefill(PREFIX, namespace=ns)
        if lane != "inproc":
            monkeypatch.setenv("PION_PROMPT_CACHE_NO_INPROC", "1")
            with PionPromptCache(tiny, vquant="fp32", port=shared_pion_server.port, stage2=True,
                                 stage2_lane=lane) as reader:
                cache = reader.get_or_prefill(PREFIX, namespace=ns)
                assert generate_ids(tiny, tok, SUFFIX, prompt_cache=cache, max_tokens=12) == want
        else:
            assert generate_ids(tiny, tok, SUFFIX, prompt_cache=cache, max_tokens=12) == want


def test_a_demoted_prefix_is_rehydrated_once_and_answers_correctly(tiny: Any, pion_server: ServerProcess,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    want = dense_suffix_logits(tiny, PREFIX, SUFFIX)
    ns = "tiny-cold"
    with PionPromptCache(tiny, vquant="fp16", port=pion_server.port, stage2=True) as writer:
        writer.get_or_prefill(PREFIX, namespace=ns)
    with pion_server.client() as r:
        filler = np.zeros((1, 1, 4), dtype="<f4").tobytes()
        for i in range(256):
            r.execute_command("ATTEND.PREFIX.STORE", f"filler{i}", 0, 1, 1, 4, filler, filler)
        assert r.execute_command("ATTEND.PREFIX.LOOKUP", f"{ns}_attn", 0) == b"COLD"
    monkeypatch.setenv("PION_PROMPT_CACHE_NO_INPROC", "1")
    pc = PionPromptCache(tiny, vquant="fp16", port=pion_server.port, stage2=True, stage2_lane="resp")
    assert pc.lookup(ns) is False  # the V-store holds it, the ATTEND side does not
    cache = make_pion_prompt_cache(tiny, ns, pc, len(PREFIX))
    got = logits(tiny, SUFFIX, cache)
    assert pc.cold_rehydrates_observed == 1
    assert pc.lookup(ns) is True
    pc.close()
    assert max_err(got, want) < 2e-2  # K/V came back from fp16 V-store rows


def test_make_pion_prompt_cache_refuses_a_stage1_prompt_cache(tiny: Any, shared_pion_server: ServerProcess) -> None:
    with PionPromptCache(tiny, vquant="fp32", port=shared_pion_server.port) as pc:
        with pytest.raises(ValueError, match="stage2=True"):
            make_pion_prompt_cache(tiny, "x", pc, 4)


def test_with_no_server_stage2_prefills_locally_and_attends_in_process(tiny: Any) -> None:
    from support.procs import free_port

    want = dense_suffix_logits(tiny, PREFIX, SUFFIX)
    with PionPromptCache(tiny, vquant="fp32", port=free_port(), stage2=True) as pc:
        assert pc.local_only is True
        cache = pc.get_or_prefill(PREFIX, namespace="tiny-local")
        assert max_err(logits(tiny, SUFFIX, cache), want) < 1e-4
        assert (pc.stats()["misses"], pc.stage2.counters.wire_calls) == (1, 0)
