"""Tiny random-weight hybrid / recurrent models for tests and benchmarks (no download).

Each config keeps every dimension small so a CPU forward takes milliseconds; ``save_tiny``
writes one to a directory that ``AutoModelForCausalLM.from_pretrained`` (and pion-llm) load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FAMILIES = ("mamba2", "jamba", "qwen3_next", "lfm2")


def tiny_config(family: str) -> Any:
    import transformers

    if family == "mamba2":
        return transformers.Mamba2Config(vocab_size=128, hidden_size=64, num_hidden_layers=2, state_size=16,
                                         expand=2, n_groups=1, num_heads=8, head_dim=16, conv_kernel=4,
                                         chunk_size=16)
    if family == "jamba":
        return transformers.JambaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                        num_attention_heads=4, num_key_value_heads=2, attn_layer_period=2,
                                        attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                                        num_experts=2, num_experts_per_tok=1, mamba_d_state=8, mamba_d_conv=4,
                                        mamba_expand=2, mamba_dt_rank=8)
    if family == "qwen3_next":  # GatedDeltaNet + full attention, 1:1
        return transformers.Qwen3NextConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                            head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2,
                                            linear_key_head_dim=16, linear_value_head_dim=16,
                                            linear_conv_kernel_dim=4, num_experts=2, num_experts_per_tok=1,
                                            moe_intermediate_size=32, shared_expert_intermediate_size=32,
                                            full_attention_interval=2)
    if family == "lfm2":  # short convs + full attention
        return transformers.Lfm2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                       num_attention_heads=4, num_key_value_heads=2, conv_L_cache=3,
                                       layer_types=["conv", "full_attention", "conv", "full_attention"])
    raise ValueError(f"unknown tiny family {family!r}")


def save_tiny(family: str, directory: Path, seed: int = 0) -> Path:
    """Build the tiny model with seeded random weights and save it (with no tokenizer) to ``directory``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family))
    model.save_pretrained(directory)
    return directory
