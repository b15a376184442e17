"""The K/V geometry of a decoder model, with no runtime imported (both runtimes and the transport share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KvShape:
    """The K/V geometry of a decoder model."""

    n_layers: int
    n_kv_heads: int
    head_dim: int

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @classmethod
    def from_config(cls, config: Any) -> KvShape:
        text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
        n_heads = int(text.num_attention_heads)
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // n_heads
        n_kv_heads = getattr(text, "num_key_value_heads", None) or n_heads
        return cls(int(text.num_hidden_layers), int(n_kv_heads), int(head_dim))
