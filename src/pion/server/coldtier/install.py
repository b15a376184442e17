"""``install_cold_tier``: the one call ``state.build_state`` makes for ``--cold-tier``.

The cold tier's modules (and redis-py's cluster client under them, ~0.1 s of CPU) are imported
only when ``--cold-tier`` is given: every server start without one, in production and in each
test, skips them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.server.commands.spec import CommandSpec
from pion.server.config import ServerConfig
from pion.server.receipt import Receipt
from pion.server.store.stores import Stores

if TYPE_CHECKING:
    from pion.server.coldtier.bridge import ColdBridge


def install_cold_tier(config: ServerConfig, stores: Stores, receipt: Receipt,
                      specs: dict[str, CommandSpec]) -> ColdBridge | None:
    """None without ``--cold-tier``; else the bridge, its handlers swapped into ``specs`` and
    its counters added to PION.STATS. ``bridge.start()`` runs after recovery (open_state)."""
    if not config.cold_tier:
        return None
    from pion.server.coldtier.bridge import ColdBridge
    from pion.server.coldtier.commands import wrap_commands
    from pion.server.coldtier.tier import ColdTier
    from pion.server.coldtier.url import parse_cold_tier_url

    tier = ColdTier(parse_cold_tier_url("--cold-tier", config.cold_tier), config.cold_tier_mode)
    bridge = ColdBridge(tier, stores.vstore, stores.attend)
    wrap_commands(specs, bridge)
    receipt.sections.append(tier.stats)
    return bridge
