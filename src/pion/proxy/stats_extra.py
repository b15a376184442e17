"""The /v1/stats keys of the optional layers: distill, router, the server behind the cache.

``mlx_gpu`` stays null: the original design's MLX sidecar has no counterpart here (pion-llm runs on
torch and reports no accelerator statistics to the proxy); docs/proxy.md says so.
"""

from __future__ import annotations

from typing import Any

from pion.proxy.cache_client import SemanticCacheClient
from pion.proxy.config import ServeConfig
from pion.proxy.distill import Distiller
from pion.proxy.router import IntentRouter


async def layer_stats(config: ServeConfig, cache: SemanticCacheClient, router: IntentRouter | None,
                      distill: Distiller | None) -> dict[str, Any]:
    """distill_enabled, l3_concepts, l3_fragments, intent_router and v_store for /v1/stats."""
    out: dict[str, Any] = {"distill_enabled": distill is not None}
    if distill is not None:
        out["l3_concepts"] = distill.concepts_schema()
        out["l3_fragments"] = distill.fragments_schema()
    if router is not None:
        out["intent_router"] = router.schema()
    if config.cache_active:
        stats = await cache.server_stats()
        # v_store: where the L1/L3 state lives, and that server's value receipt (PION.STATS)
        out["v_store"] = {"host": config.pion_host, "port": config.pion_port, "connected": stats is not None,
                          "pion_stats": stats, "error": cache.last_error if stats is None else None}
    return out
