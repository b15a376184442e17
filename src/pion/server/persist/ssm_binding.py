"""How the SSM state store (SSM.PREFIX.*) is logged, replayed and snapshotted.

The store's journal kinds map one-to-one onto record types 16-19 (records.py); replay
applies them through the store's own methods with its journal detached; a snapshot writes
one SSM.PREFIX.STORE per held layer, least recently used namespace first, after every
V-store record (so a state whose K/V sessions are replayed first is not removed by them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pion.server.persist.records import RecordType

if TYPE_CHECKING:
    from pion.server.store.ssm import SsmStateStore

SSM_KINDS: dict[str, RecordType] = {
    "store": RecordType.SSM_PREFIX_STORE,
    "drop": RecordType.SSM_PREFIX_DROP,
    "evict": RecordType.SSM_PREFIX_EVICT,
    "flush": RecordType.SSM_PREFIX_FLUSH,
}
SSM_TYPES = frozenset(SSM_KINDS.values())


def apply_ssm(store: SsmStateStore, rtype: int, f: dict[str, Any]) -> None:
    """Replay one SSM record into the store (journal detached: nothing is re-logged)."""
    if rtype == RecordType.SSM_PREFIX_STORE:
        store.restore(f["ns"], f["layer"], bytes(f["state"]))
    elif rtype == RecordType.SSM_PREFIX_DROP:
        store.drop(f["ns"], f.get("layer"))
    elif rtype == RecordType.SSM_PREFIX_EVICT:
        store.evict(list(f["namespaces"]))
    else:
        store.flush()


def ssm_snapshot_records(store: SsmStateStore) -> Iterator[tuple[RecordType, dict[str, Any]]]:
    """One SSM.PREFIX.STORE per held layer (blobs are immutable bytes: no copy here)."""
    for entry in store.iter_entries():
        for layer, blob in sorted(entry.layers.items()):
            yield RecordType.SSM_PREFIX_STORE, {"ns": entry.ns, "layer": layer, "state": blob}
