"""KV prefix registrations: which namespaces are registered, their block tables, receipt data.

A prefix ``ns`` is two V-store sessions, ``<ns>_pk`` (keys) and ``<ns>_pv``
(values). The entry here carries what REGISTER said beyond the sessions: the
optional block-hash table (for cache-aware routers), the optional layer count
that gates LOOKUP, and the optional measured cold prefill time credited on hits.

The block table and its wire forms (KV.PREFIX.BLOCKS, MEMBERSHIP) are
``pion.common.blocks.BlockTable``, the one the client builds.
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.common.blocks import BlockTable
from pion.common.ids import Namespace

__all__ = ["BlockTable", "PrefixEntry"]


@dataclass
class PrefixEntry:
    """What KV.PREFIX.REGISTER recorded for one namespace."""

    ns: Namespace
    kv_dim: int
    k_formats: tuple[str, ...]
    v_formats: tuple[str, ...]
    uniform: bool
    blocks: BlockTable | None = None
    layers: int | None = None
    prefill_ms: float | None = None
