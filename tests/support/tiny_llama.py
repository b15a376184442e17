"""The tiny random Llama (GQA 4:2, 64 wide) the Stage 2 and retrieval tests run real forward
passes on, and the dense-attention reference they compare Pion's attention with.

One builder, so that every module's model has the same weights for the same settings
(``torch.manual_seed(0)`` right before it is built) and a change of shape is made once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pion.client.runtimes.transformers_runtime import cache_forward_kwargs


def tiny_llama(model_id: str | None = None, *, n_layers: int = 2, max_positions: int = 256,
               rope: dict[str, Any] | None = None, without_eos: bool = False) -> Any:
    """A seeded ``LlamaForCausalLM`` in eval mode: vocab 128, 4 query and 2 K/V heads of 16.

    ``model_id`` is set as ``pion_model_id`` (what PionPromptCache names the model by);
    ``without_eos`` lets greedy generation run its full length."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    extra: dict[str, Any] = {} if rope is None else {"rope_parameters": rope}
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=n_layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=max_positions, **extra)
    if without_eos:
        config.eos_token_id = None
    model = LlamaForCausalLM(config).eval()
    if model_id is not None:
        model.pion_model_id = model_id
    return model


@torch.inference_mode()
def logits(model: Any, ids: list[int], cache: Any | None = None) -> np.ndarray:
    """Float32 logits of every position of ``ids`` (after ``cache`` when one is given)."""
    kwargs = cache_forward_kwargs(model, cache) if cache is not None else {}
    out = model(input_ids=torch.tensor([ids]), use_cache=cache is not None, **kwargs)
    return out.logits[0].float().numpy()


def dense_suffix_logits(model: Any, prefix: list[int], suffix: list[int]) -> np.ndarray:
    """The reference: sdpa over the whole prompt, the suffix's positions only."""
    model.set_attn_implementation("sdpa")
    return logits(model, prefix + suffix)[len(prefix):]


def max_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max())
