"""--pion-budget-gb keeps this pion-llm's segments under the budget by dropping LRU leaves only."""

from __future__ import annotations

from pathlib import Path

import pytest

from pion.client.runtimes.model_files import resolve_model
from pion.common.ids import k_session
from pion.llm.segments import (
    ChainLink,
    ModelShape,
    SegmentKV,
    chain_links,
    child_namespace,
    plan_chat,
    root_namespace,
)
from pion.llm.stores import MemorySegmentStore, PionSegmentStore
from support.llm_procs import MODEL, start_llm
from support.procs import ServerProcess

SYSTEM = "You are a helpful cooking assistant. Suggest one simple recipe with three ingredients. " * 3
SHAPE_ARGS = (30, 3, 64)  # SmolLM2-135M: layers, kv heads, head dim
BYTES_PER_TOKEN = 2 * 30 * 192 * 2  # K and V, every layer, fp16
BUDGET_GB = 0.004  # ~186 tokens: one 3-turn chain fits (146), all 12 conversations (431) do not


def conversation(user: int, turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": SYSTEM}]
    for turn in range(turns):
        if turn:
            messages.append({"role": "assistant", "content": f"Try dish number {turn} for user {user}."})
        messages.append({"role": "user", "content": f"User {user}, turn {turn}: what should I cook with "
                                                    f"{'rice' if user % 2 else 'pasta'} tonight?"})
    return messages


def held_sessions(server: ServerProcess) -> set[str]:
    with server.client() as conn:
        return {sid.decode() for sid in conn.execute_command("V.LIST")}


def vstore_bytes(server: ServerProcess) -> int:
    with server.client() as conn:
        info = conn.execute_command("KV.PREFIX.INFO").decode()
    return int(dict(line.split(":", 1) for line in info.splitlines() if ":" in line)["vstore_bytes"])


@pytest.mark.slow  # starts pion-llm, which loads SmolLM2
def test_budget_eviction_stays_under_the_budget_and_never_drops_an_interior_segment(
        pion_server: ServerProcess, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    resolved = resolve_model(MODEL)
    tok = AutoTokenizer.from_pretrained(resolved.path)
    root = root_namespace(ModelShape(*SHAPE_ARGS, model_id=resolved.model_id), "fp16")
    budget_bytes = int(BUDGET_GB * 1024**3)
    llm = start_llm(tmp_path, "--pion-port", str(pion_server.port), "--pion-budget-gb", str(BUDGET_GB))
    chains: list[list[str]] = []
    try:
        client = llm.openai()
        for turns in (1, 2, 3):
            for user in range(4):
                messages = conversation(user, turns)
                client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, temperature=0)
                assert vstore_bytes(pion_server) <= budget_bytes
                chains.append([link.namespace for link in chain_links(root, plan_chat(tok, messages))])
        held = {sid.removesuffix("_pk") for sid in held_sessions(pion_server) if sid.endswith("_pk")}
        # Every chain's held segments are a prefix of it: no segment is held without its ancestors.
        for chain in chains:
            present = [ns in held for ns in chain]
            assert present == sorted(present, reverse=True)
        system_ns = chains[0][0]
        assert k_session(system_ns).removesuffix("_pk") in held
        assert len(held) < len({ns for chain in chains for ns in chain})  # something was evicted
        assert "budget: dropped" in llm.log()
        last = client.chat.completions.create(model=MODEL, messages=conversation(3, 3), max_tokens=2, temperature=0)
        assert last.usage.prompt_tokens_details.cached_tokens == last.usage.prompt_tokens - 4
    finally:
        llm.stop()


def test_the_budget_counts_the_bytes_pion_server_really_holds_in_every_storage_format(
        pion_server: ServerProcess) -> None:
    import torch

    shape = ModelShape(2, 2, 32, model_id="budget-bytes")
    n_tokens = 7
    for fmt in ("fp16", "fp32", "int8", "fp8", "turbo4", "mlx4g32"):
        store = PionSegmentStore(shape, fmt, port=pion_server.port)
        rows = SegmentKV(torch.randn(2, 2, n_tokens, 32), torch.randn(2, 2, n_tokens, 32))
        link = ChainLink(child_namespace(root_namespace(shape, fmt), list(range(n_tokens))), None, n_tokens, 0)
        before = vstore_bytes(pion_server)
        assert store.store(link, rows) is True
        assert vstore_bytes(pion_server) - before == store.stored_bytes(shape, n_tokens)
    assert ModelShape(*SHAPE_ARGS).segment_bytes(100) == 100 * BYTES_PER_TOKEN


def test_the_in_process_store_counts_the_model_dtype_bytes() -> None:
    assert MemorySegmentStore(4).stored_bytes(ModelShape(*SHAPE_ARGS), 10) == 2 * 10 * BYTES_PER_TOKEN
