"""The MLX runtime's public names: ``from pion.mlx import PionPromptCache, ...`` (the spec's quick start).

Importing this module imports mlx and mlx-lm (the ``[mlx]`` extra); ``import pion`` never does.

    from pion.mlx import PionPromptCache, install_pion_attention_patch, make_pion_prompt_cache
    model, tok = pion.load_model(runtime="mlx")          # or mlx_lm.load(path)
    pc = PionPromptCache(model, vquant="mlx4g32", tokenizer=tok)
    cache = pc.get_or_prefill(prefix_ids)                 # a list of mlx-lm cache objects
    text = mlx_lm.generate(model, tok, prompt=suffix_ids, prompt_cache=cache, max_tokens=64)
"""

from __future__ import annotations

from pion.client.mlx_prompt_cache import PionPromptCache
from pion.client.runtimes.mlx_runtime import generate, generate_ids, load_model
from pion.client.runtimes.mlx_stage2 import install_pion_attention_patch, make_pion_prompt_cache

__all__ = ["PionPromptCache", "generate", "generate_ids", "install_pion_attention_patch", "load_model",
           "make_pion_prompt_cache"]
