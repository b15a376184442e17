"""pion-lmcache: ``PionStore``, per-layer K/V in pion-server for an LMCache-style storage backend."""

from pion.lmcache.store import PionStore

__all__ = ["PionStore"]
