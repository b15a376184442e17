"""The hook through which every V-store mutation is logged before it is applied.

``VStore`` calls ``journal.record(kind, fields)`` exactly once per mutation,
*after* validating the request (so a refused command logs nothing) and *before*
changing any state (so the log is never behind what a client was told). The
persistence layer (``pion.server.persist``) supplies a real journal; the default
``NullJournal`` does nothing.

Records (``fields`` keys, all plain Python values; ``bytes``/``memoryview`` for blobs):

  create    sid, kv_dim, formats (tuple[str, ...] per layer, or a 1-tuple for a
            uniform session), uniform (bool)
  store     sid, layer, start_id, n_rows, rows (memoryview of the ENCODED rows,
            valid only during the call — copy it if kept)
  drop      sid
  register  ns, kv_dim, k_formats, v_formats, uniform, block_size, hashes
            (bytes of u64 LE or None), layers (int or None), prefill_ms (float or None)
  prefix_drop  ns (both sides and the registration go)
  evict     sids (list of session ids, a K/V pair always together)
  flush     (no fields: every session and registration goes; FLUSHALL)

Replay: call the same ``VStore`` methods with the journal detached —
``create_session``, ``store_rows(..., dtype="raw")``, ``drop``,
``register_prefix``, ``drop_prefixes([ns])``, ``evict_sessions``, ``flush`` —
they produce the same state. Dropping or evicting either side of ``<ns>_pk`` /
``<ns>_pv`` also removes the registration of ``ns``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Journal(Protocol):
    """Receives one record per V-store mutation, before it is applied.

    Raising from ``record`` aborts the mutation: nothing is changed and the error
    propagates to the command (e.g. ``CommandError(..., code="MISCONF")``).
    """

    def record(self, kind: str, fields: Mapping[str, object]) -> None:
        ...


class NullJournal:
    """No persistence: records go nowhere."""

    def record(self, kind: str, fields: Mapping[str, object]) -> None:
        return None
