"""The MLX runtime's public names: ``from pion.mlx import PionPromptCache, ...`` (the spec's quick start).

Importing this module imports mlx and mlx-lm (the ``[mlx]`` extra); ``import pion`` never does.
The stage-1 path (``PionPromptCache``, ``load_model``, ``generate``) imports no torch, so
``pip install 'pion[mlx]'`` needs none; Stage 2 (``install_pion_attention_patch``,
``make_pion_prompt_cache``, ``stage2=True``) still shares torch-based lane code with the
transformers runtime and is imported on first use (PEP 562).

    from pion.mlx import PionPromptCache, install_pion_attention_patch, make_pion_prompt_cache
    model, tok = pion.load_model(runtime="mlx")          # or mlx_lm.load(path)
    pc = PionPromptCache(model, vquant="mlx4g32", tokenizer=tok)
    cache = pc.get_or_prefill(prefix_ids)                 # a list of mlx-lm cache objects
    text = mlx_lm.generate(model, tok, prompt=suffix_ids, prompt_cache=cache, max_tokens=64)
"""

from __future__ import annotations

import importlib
from typing import Any

from pion.client.mlx_prompt_cache import PionPromptCache
from pion.client.runtimes.mlx_runtime import generate, generate_ids, load_model

_STAGE2 = {"install_pion_attention_patch", "make_pion_prompt_cache"}  # from pion.client.runtimes.mlx_stage2

__all__ = ["PionPromptCache", "generate", "generate_ids", "install_pion_attention_patch", "load_model",
           "make_pion_prompt_cache"]


def __getattr__(name: str) -> Any:
    if name not in _STAGE2:
        raise AttributeError(f"module 'pion.mlx' has no attribute {name!r}")
    return getattr(importlib.import_module("pion.client.runtimes.mlx_stage2"), name)
