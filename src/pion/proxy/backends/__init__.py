"""Backend registry: name -> "module:Class", imported only when a backend is made.

Register new backends with ``register_backend``; names are unique.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

    from pion.proxy.backends.base import Backend

_REGISTRY: dict[str, str] = {}


def register_backend(name: str, target: str) -> None:
    """Register ``target`` ("package.module:Class") under ``name``; duplicates are refused."""
    if name in _REGISTRY:
        raise ValueError(f"backend {name!r} is already registered")
    _REGISTRY[name] = target


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


def make_backend(name: str, base_url: str | None, http: httpx.AsyncClient) -> Backend:
    """Import and build the backend called ``name``."""
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (one of {', '.join(backend_names())})") from None
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    backend: Backend = cls(name, base_url, http)
    return backend


for _name in ("pion", "openai", "vllm", "llamacpp", "max"):
    register_backend(_name, "pion.proxy.backends.openai_compat:OpenAICompatBackend")
register_backend("ollama", "pion.proxy.backends.ollama:OllamaBackend")
register_backend("claude", "pion.proxy.backends.claude:ClaudeBackend")
register_backend("gemini", "pion.proxy.backends.gemini:GeminiBackend")
