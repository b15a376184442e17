"""Stage 2 for transformers: prefix attention served by pion-server (or in process).

``install_pion_attention_patch()`` registers the ``"pion"`` attention; ``make_pion_prompt_cache``
builds a cache whose layers attend over a prefix held by ``PionPromptCache(stage2=True)``.
"""

from __future__ import annotations

from typing import Any

from pion.client.stage2.patch import install_pion_attention_patch


def make_pion_prompt_cache(model: Any, namespace: str, pc: Any, prefix_len: int) -> Any:
    """A transformers ``DynamicCache`` for ``model`` whose first ``prefix_len`` tokens are the prefix
    ``namespace`` held by ``pc`` (a ``PionPromptCache(stage2=True)``); pass it as the model's cache
    with the suffix ids only. Lane: in-process when ``pc`` prefilled it, else binary, else RESP.
    """
    if getattr(pc, "stage2", None) is None:
        raise ValueError("make_pion_prompt_cache needs a PionPromptCache created with stage2=True")
    return pc.stage2.make_cache(str(namespace), int(prefix_len))


__all__ = ["install_pion_attention_patch", "make_pion_prompt_cache"]
