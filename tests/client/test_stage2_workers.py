"""Stage 2 under ``pion-server -w 2``: a PionPromptCache pinned to worker 1 attends a prefix that
worker 0 owns. Its stage-2 RESP calls follow the redirect to worker 0, its binary lane (worker 1's
own lane, found with PION.WORKER) follows the lane redirect to worker 0's lane, and the suffix
logits are the very numbers a reader on worker 0 gets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from pion import PionPromptCache, make_pion_prompt_cache
from pion.client.runtimes.transformers_runtime import cache_forward_kwargs
from support.procs import free_port
from support.tiny_llama import tiny_llama
from support.workers import WorkerGroup, start_workers, worker_info

PREFIX = list(range(3, 35))  # 32 tokens
SUFFIX = [50, 51, 52, 53]


@pytest.fixture(scope="module")
def tiny() -> Any:
    return tiny_llama("tiny-llama-workers", max_positions=128)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGroup]:
    started = start_workers(tmp_path_factory.mktemp("s2w"), 2, "--binary-port", str(free_port()))
    try:
        yield started
    finally:
        started.server.stop()


@torch.inference_mode()
def suffix_logits(model: Any, cache: Any) -> list[list[float]]:
    out = model(input_ids=torch.tensor([SUFFIX]), use_cache=True, **cache_forward_kwargs(model, cache))
    return out.logits[0].float().numpy().tolist()  # type: ignore[no-any-return]


def remote_logits(model: Any, port: int, ns: str, **kwargs: Any) -> tuple[list[list[float]], PionPromptCache]:
    reader = PionPromptCache(model, vquant="fp32", port=port, stage2=True, stage2_lane="binary", **kwargs)
    reader.get_or_prefill(PREFIX, namespace=ns)
    return suffix_logits(model, make_pion_prompt_cache(model, ns, reader, len(PREFIX))), reader


def lane_ports(group: WorkerGroup) -> list[int]:
    with group.worker(0) as conn:
        found = worker_info(conn)["binary_addresses"]
    assert isinstance(found, list)
    return [int(str(a).rsplit(":", 1)[1]) for a in found]


def test_a_reader_on_worker_1_attends_worker_0s_prefix_over_the_lane_with_the_owners_numbers(
        tiny: Any, group: WorkerGroup, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny.set_attn_implementation("sdpa")
    ns = "s2w-follow"
    with PionPromptCache(tiny, vquant="fp32", port=group.ports[0], stage2=True) as writer:
        writer.get_or_prefill(PREFIX, namespace=ns)
    monkeypatch.setenv("PION_PROMPT_CACHE_NO_INPROC", "1")  # readers are other processes: over the wire
    lanes = lane_ports(group)
    want, on_owner = remote_logits(tiny, group.ports[0], ns)
    # worker 1's lane named explicitly: the lane itself is redirected to worker 0's lane
    got, reader = remote_logits(tiny, group.ports[1], ns, stage2_binary_port=lanes[1])
    # no lane port: the RESP client, already moved to worker 0, names worker 0's lane (PION.WORKER)
    got_found, finder = remote_logits(tiny, group.ports[1], ns)
    try:
        assert got == got_found == want
        assert np.isfinite(np.array(want)).all()
        readers = (on_owner, reader, finder)
        assert [(r.stats()["hits"], r.stats()["fallbacks"]) for r in readers] == [(1, 0)] * 3
        # the warm check (ATTEND.PREFIX.LOOKUP) moved the readers' RESP clients to worker 0
        assert [r.client.redirects if r.client is not None else None for r in readers] == [0, 1, 1]
        binaries = [r.stage2._binary for r in readers]
        assert [(b.redirects, b.sock.getpeername()[1]) if b is not None else None for b in binaries] == [
            (0, lanes[0]), (1, lanes[1]), (0, lanes[0])]
        assert [r.stage2.counters.wire_calls for r in readers] == [2, 2, 2]  # one QUERY_FUSED per layer
    finally:
        for r in (on_owner, reader, finder):
            r.close()


def test_with_redirects_off_a_reader_on_the_wrong_worker_prefills_locally(
        tiny: Any, group: WorkerGroup, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny.set_attn_implementation("sdpa")
    ns = "s2w-off"
    with PionPromptCache(tiny, vquant="fp32", port=group.ports[0], stage2=True) as writer:
        writer.get_or_prefill(PREFIX, namespace=ns)
    monkeypatch.setenv("PION_PROMPT_CACHE_NO_INPROC", "1")
    with PionPromptCache(tiny, vquant="fp32", port=group.ports[1], stage2=True, stage2_lane="binary",
                         stage2_follow_redirects=False) as reader:
        reader.get_or_prefill(PREFIX, namespace=ns)
        stats = reader.stats()
        assert (stats["hits"], stats["misses"], stats["fallbacks"]) == (0, 1, 1)  # the redirect was the error
        assert reader.stage2.counters.wire_calls == 0
