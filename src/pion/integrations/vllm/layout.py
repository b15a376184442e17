"""vLLM's paged K/V layout <-> Pion rows, on the worker (no vLLM import: plain torch).

vLLM hands a connector one paged tensor per attention layer. The CPU attention backend
(``CPU_ATTN``, ``vllm/v1/attention/backends/cpu_attn.py``) lays a layer out as
``[num_blocks, n_kv_heads, block_size, 2 * head_dim]``, which it reads as
``[num_blocks, n_kv_heads, 2 * block_size, head_dim]``: inside each block and head, the keys of
all ``block_size`` tokens, then their values. Pion stores a token as one row of
``n_kv_heads * head_dim`` values (heads concatenated), so a block of one layer is
``[block_size, kv_dim]`` rows per side — gathered here with one advanced index per side.

Other backends (FlashAttention's ``[2, num_blocks, block_size, n_kv_heads, head_dim]`` on CUDA)
need their own ``PagedLayout``; ``layout_for`` refuses what it does not know, with the shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CpuAttnLayout:
    """``[num_blocks, n_kv_heads, block_size, 2 * head_dim]`` per layer (keys then values per block-head)."""

    n_kv_heads: int
    head_dim: int
    block_size: int

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def _split(self, layer: torch.Tensor) -> torch.Tensor:
        n_blocks = layer.shape[0]
        return layer.view(n_blocks, self.n_kv_heads, 2 * self.block_size, self.head_dim)

    def gather(self, layer: torch.Tensor, block_ids: list[int]) -> torch.Tensor:
        """``[2, len(block_ids) * block_size, kv_dim]``: the K and V rows of those blocks, in order."""
        view = self._split(layer)[block_ids]  # [n, H, 2B, D]
        n, bs = len(block_ids), self.block_size
        k = view[:, :, :bs].permute(0, 2, 1, 3).reshape(n * bs, self.kv_dim)
        v = view[:, :, bs:].permute(0, 2, 1, 3).reshape(n * bs, self.kv_dim)
        return torch.stack((k, v))

    def scatter(self, layer: torch.Tensor, block_ids: list[int], rows: torch.Tensor) -> None:
        """Write ``[2, len(block_ids) * block_size, kv_dim]`` rows into those blocks of ``layer``."""
        n, bs = len(block_ids), self.block_size
        view = self._split(layer)
        index = torch.tensor(block_ids, dtype=torch.long)
        for side, start in ((0, 0), (1, bs)):
            per_block = rows[side].reshape(n, bs, self.n_kv_heads, self.head_dim).permute(0, 2, 1, 3)
            view[index, :, start:start + bs] = per_block.to(layer.dtype)


def layout_for(layer: torch.Tensor, n_kv_heads: int, head_dim: int, block_size: int) -> CpuAttnLayout:
    """The layout of one registered layer; ValueError for a shape this connector cannot read."""
    expected = (n_kv_heads, block_size, 2 * head_dim)
    if layer.dim() == 4 and tuple(layer.shape[1:]) == expected and layer.is_contiguous():
        return CpuAttnLayout(n_kv_heads, head_dim, block_size)
    raise ValueError(f"PionConnector reads vLLM's CPU_ATTN layout [num_blocks, {n_kv_heads}, {block_size}, "
                     f"{2 * head_dim}] (contiguous); this layer is {tuple(layer.shape)} with strides {layer.stride()}")
