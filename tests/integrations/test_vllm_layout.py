"""The paged-layout conversion of PionConnector (plain torch; no vLLM needed) and import hygiene."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pion.integrations.vllm.layout import CpuAttnLayout, layout_for

N_BLOCKS, HEADS, BLOCK, HEAD_DIM = 6, 2, 4, 8


def paged_layer() -> torch.Tensor:
    """A CPU_ATTN layer whose every value says where it is: block, head, K/V row, dim."""
    layer = torch.empty(N_BLOCKS, HEADS, BLOCK, 2 * HEAD_DIM)
    view = layer.view(N_BLOCKS, HEADS, 2 * BLOCK, HEAD_DIM)
    for b in range(N_BLOCKS):
        for h in range(HEADS):
            for r in range(2 * BLOCK):
                view[b, h, r] = torch.arange(HEAD_DIM) + 1000 * b + 100 * h + 10 * r
    return layer


def test_gather_reads_keys_then_values_as_token_rows_with_heads_concatenated() -> None:
    layout = layout_for(paged_layer(), HEADS, HEAD_DIM, BLOCK)
    rows = layout.gather(paged_layer(), [3, 1])
    assert tuple(rows.shape) == (2, 2 * BLOCK, HEADS * HEAD_DIM)
    # token 1 of block 3: K is row 1, V is row BLOCK + 1 of each head
    assert rows[0, 1].tolist() == [3000 + 10 * 1 + d for d in range(HEAD_DIM)] + [3100 + 10 * 1 + d for d in range(HEAD_DIM)]
    assert rows[1, BLOCK + 2].tolist() == ([1000 + 10 * (BLOCK + 2) + d for d in range(HEAD_DIM)]
                                          + [1100 + 10 * (BLOCK + 2) + d for d in range(HEAD_DIM)])


def test_scatter_into_other_blocks_then_gather_gives_the_same_rows() -> None:
    source, target = paged_layer(), torch.zeros(N_BLOCKS, HEADS, BLOCK, 2 * HEAD_DIM)
    layout = CpuAttnLayout(HEADS, HEAD_DIM, BLOCK)
    rows = layout.gather(source, [0, 5])
    layout.scatter(target, [2, 4], rows)
    assert torch.equal(layout.gather(target, [2, 4]), rows)
    assert torch.equal(target[[0, 1, 3, 5]], torch.zeros(4, HEADS, BLOCK, 2 * HEAD_DIM))


def test_a_layout_the_connector_cannot_read_is_refused_with_its_shape() -> None:
    flash_attn_like = torch.zeros(2, N_BLOCKS, BLOCK, HEADS, HEAD_DIM)
    with pytest.raises(ValueError, match=r"this layer is \(2, 6, 4, 2, 8\)"):
        layout_for(flash_attn_like, HEADS, HEAD_DIM, BLOCK)
    with pytest.raises(ValueError, match="CPU_ATTN layout"):
        layout_for(paged_layer().transpose(1, 2), HEADS, HEAD_DIM, BLOCK)


def test_importing_the_integrations_loads_neither_engine_nor_torch() -> None:
    code = ("import sys, pion, pion.integrations, pion.integrations.lmcache, pion.integrations.vllm; "
            "print(sorted(m for m in ('torch', 'lmcache', 'vllm', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
