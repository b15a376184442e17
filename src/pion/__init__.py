"""Pion: an open memory layer for LLM inference.

The client API (PionClient, PionPromptCache, load_model, generate) is imported
lazily so that ``import pion`` stays cheap for the server, which never needs torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from pion import _compiled

__version__ = "0.1.0"

# Before any server module loads: PION_PURE_PYTHON=1 or a stale mypyc build -> the .py files.
_compiled.install()

# name -> module that defines it; resolved on first attribute access (PEP 562).
_LAZY_EXPORTS = {
    "PionClient": "pion.client.connection",
    "PionPromptCache": "pion.client.prompt_cache",
    "HybridRetrievalCache": "pion.client.retrieval_cache",
    "load_model": "pion.client.runtimes.loading",  # runtime="transformers" (default) or "mlx"
    "generate": "pion.client.runtimes.transformers_runtime",
    "stream_generate": "pion.client.runtimes.transformers_runtime",
    "install_pion_attention_patch": "pion.client.stage2",
    "make_pion_prompt_cache": "pion.client.stage2",
}

__all__ = ["__version__", *_LAZY_EXPORTS]


def __getattr__(name: str) -> Any:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'pion' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
