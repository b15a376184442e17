"""LMCache remote storage plugin: LMCache's KV chunks stored as Pion prefixes.

Enable it in an LMCache config (``remote_storage_plugins`` is LMCache 0.5's plugin framework)::

    remote_storage_plugins: ["pion"]
    extra_config:
      remote_storage_plugin.pion.module_path: pion.integrations.lmcache
      remote_storage_plugin.pion.class_name: PionConnectorAdapter
      remote_storage_plugin.pion.url: pion://127.0.0.1:1974
      remote_storage_plugin.pion.vquant: fp16        # auto | fp16 | fp32 | fp8 | int8 | ...

``PionConnectorAdapter`` and ``PionRemoteConnector`` (``connector.py``) import lmcache, so they are
resolved on first attribute access; ``pion.integrations.kv_chunks`` (the Pion side) needs only torch and redis-py.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY_EXPORTS = {
    "PionConnectorAdapter": "pion.integrations.lmcache.connector",
    "PionRemoteConnector": "pion.integrations.lmcache.connector",
    "KvChunkStore": "pion.integrations.kv_chunks",
    "ChunkGeometry": "pion.integrations.kv_chunks",
}

__all__ = list(_LAZY_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'pion.integrations.lmcache' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
