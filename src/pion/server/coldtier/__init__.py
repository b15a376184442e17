"""The shared cold tier: a Redis Cluster (or one Redis/Valkey) behind every pion-server front.

The in-memory V-store stays the warm tier. With ``--cold-tier`` a prefix's encoded rows are
copied to the cluster (``tier.py``), a front that lacks a prefix finds it there on LOOKUP and
promotes it, and warm-tier eviction demotes instead of dropping (``hooks.py`` wires this in).
Design and trade-offs: docs/scale-out.md.
"""

from pion.server.coldtier.url import ColdTierUrl, parse_cold_tier_url

__all__ = ["ColdTierUrl", "parse_cold_tier_url"]
