"""vLLM V1 KV connector (``PionConnector``), loaded out of tree by vLLM.

``--kv-transfer-config '{"kv_connector": "PionConnector", "kv_connector_module_path":
"pion.integrations.vllm", ...}'`` makes vLLM import this package and read ``PionConnector``;
the class (``connector.py``) imports vLLM, so it is resolved on first attribute access and
``import pion.integrations.vllm`` alone stays free of vLLM. ``layout.py`` (paged layout <-> Pion
rows) is plain torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY_EXPORTS = {
    "PionConnector": "pion.integrations.vllm.connector",
    "PionConnectorMetadata": "pion.integrations.vllm.connector",
}

__all__ = list(_LAZY_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'pion.integrations.vllm' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
