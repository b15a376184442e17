"""Recurrent-state store for SSM.PREFIX.*: opaque per-layer state blobs keyed by namespace.

A hybrid model's prefix is two halves: attention layers' K/V rows (the V-store sessions
``<ns>_pk``/``<ns>_pv``) and recurrent layers' state (here, under the same ``ns``). A half
alone is useless, so the halves live and die together:

* dropping or evicting either K/V session of ``ns`` also removes ``ns``'s state here
  (``VStore.on_prefix_removed`` calls ``remove_with_prefix``; replaying the logged
  V-store record does the same, so no record of its own is needed);
* the bytes held here count toward ``--maxmemory`` (added to the V-store's
  ``external_bytes``) and toward the bytes freed when the V-store evicts the group
  (``VStore.group_extra_bytes``);
* a namespace with state but no K/V sessions (a pure-SSM model) is its own eviction
  group: an SSM.PREFIX.STORE that needs room evicts those least recently used first,
  then asks the V-store to evict K/V groups (with their state); a K/V or keyspace write
  that needs room evicts K/V groups first, then state-only namespaces (``plan_room``).

Mutations are validated, then journaled, then applied, like the V-store: their records
(``store/records.py``) are ``SsmStore``, ``SsmDrop`` (one layer, or None for every layer),
``SsmEvict`` (state-only groups evicted for room) and ``SsmFlush`` (FLUSHALL). Replay calls
``restore`` / ``drop`` / ``evict`` / ``flush`` with the journal detached.

``Stores.make`` (``store/stores.py``) joins this store to the V-store: the shared budget,
the shared eviction and the drops of a prefix's K/V sides.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pion.common.errors import CommandError
from pion.common.ids import K_SUFFIX, V_SUFFIX, Namespace
from pion.server.store.journal import Journal, NullJournal
from pion.server.store.records import SsmDrop, SsmEvict, SsmFlush, SsmStore


@dataclass
class SsmEntry:
    """One namespace's recurrent state: layer -> blob."""

    ns: Namespace
    layers: dict[int, bytes] = field(default_factory=dict)
    last_access: float = 0.0
    n_fetches: int = 0

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.layers.values())


# What the SSM store needs from the V-store (kept to one small seam so the V-store can change).
RoomMaker = Callable[[int, Namespace], None]  # (extra bytes, namespace to protect) -> may raise OOM
HasKv = Callable[[Namespace], bool]  # does ns have K/V sessions (then the V-store evicts it)?
OldestKv = Callable[[], float | None]  # last access of the V-store's least recently used session


class SsmStateStore:
    """Recurrent-state blobs by namespace and layer, in last-access order.

    Args:
        max_bytes: the shared ``--maxmemory`` budget (0 = unlimited).
        used_bytes: every byte counted against that budget (V-store + keyspace + this store).
        make_kv_room: evicts K/V groups so ``extra`` more bytes fit; raises OOM if it cannot.
        has_kv: whether a namespace has K/V sessions.
        journal: receives every mutation before it is applied.
    """

    def __init__(self, *, max_bytes: int = 0, used_bytes: Callable[[], int] | None = None,
                 make_kv_room: RoomMaker | None = None, has_kv: HasKv | None = None,
                 journal: Journal | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.used_bytes = used_bytes or (lambda: self.nbytes)
        self.make_kv_room = make_kv_room
        self.has_kv = has_kv or (lambda ns: False)
        self.journal: Journal = journal or NullJournal()
        self._clock = clock
        self._entries: OrderedDict[Namespace, SsmEntry] = OrderedDict()
        self._bytes = 0
        self.evicted_prefixes = 0
        self.total_fetches = 0

    # ---- queries -------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of every stored state blob."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def n_layers(self) -> int:
        return sum(len(e.layers) for e in self._entries.values())

    def get(self, ns: str) -> SsmEntry | None:
        """An entry without touching its LRU position."""
        return self._entries.get(Namespace(ns))

    def group_bytes(self, ns: str) -> int:
        """Bytes that leave with ``ns``'s K/V group (the V-store's eviction planning)."""
        entry = self._entries.get(Namespace(ns))
        return 0 if entry is None else entry.nbytes

    def iter_entries(self) -> Iterator[SsmEntry]:
        """Entries from least to most recently accessed (a snapshot writes them in this order)."""
        return iter(list(self._entries.values()))

    # ---- reads ---------------------------------------------------------------------------
    def fetch(self, ns: str, layers: range) -> list[bytes | None]:
        """The blobs of ``layers`` (None where a layer holds nothing); touches a held namespace."""
        entry = self._entries.get(Namespace(ns))
        if entry is None:
            return [None] * len(layers)
        self._touch(entry)
        found = [entry.layers.get(layer) for layer in layers]
        hits = sum(b is not None for b in found)
        entry.n_fetches += hits
        self.total_fetches += hits
        return found

    # ---- mutations -----------------------------------------------------------------------
    def store(self, ns: str, layer: int, blob: bytes) -> None:
        """Set one layer's state (overwrite allowed); evicts LRU groups for room or raises OOM."""
        key = Namespace(ns)
        entry = self._entries.get(key)
        old = 0 if entry is None else len(entry.layers.get(layer, b""))
        self._make_room(len(blob) - old, key)
        self.journal.append(SsmStore(ns, layer, blob))
        self.restore(ns, layer, blob)

    def restore(self, ns: str, layer: int, blob: bytes) -> None:
        """Apply a logged ``store`` (replay and the tail of ``store``): no eviction, no journal."""
        key = Namespace(ns)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = SsmEntry(key)
        self._bytes += len(blob) - len(entry.layers.get(layer, b""))
        entry.layers[layer] = bytes(blob)
        self._touch(entry)

    def drop(self, ns: str, layer: int | None = None) -> int:
        """Drop one layer (or every layer) of ``ns``; returns how many layers were held."""
        entry = self._entries.get(Namespace(ns))
        if entry is None or (layer is not None and layer not in entry.layers):
            return 0
        self.journal.append(SsmDrop(ns, layer))
        if layer is None:
            return self._remove(entry.ns)
        self._bytes -= len(entry.layers.pop(layer))
        if not entry.layers:
            del self._entries[entry.ns]
        return 1

    def evict(self, namespaces: list[str]) -> None:
        """Evict state-only namespaces for room (logged; replay evicts the same ones)."""
        present = [ns for ns in namespaces if Namespace(ns) in self._entries]
        if not present:
            return
        self.journal.append(SsmEvict(present))
        for ns in present:
            self._remove(Namespace(ns))
        self.evicted_prefixes += len(present)

    def remove_with_prefix(self, ns: str) -> None:
        """The V-store removed a K/V side of ``ns``: its state goes too (not logged: the
        V-store's own record replays to the same call)."""
        if Namespace(ns) in self._entries:
            self._remove(Namespace(ns))

    def flush(self) -> None:
        """Drop every namespace's state (FLUSHALL)."""
        if not self._entries:
            return
        self.journal.append(SsmFlush())
        self._entries.clear()
        self._bytes = 0

    # ---- internals -----------------------------------------------------------------------
    def _touch(self, entry: SsmEntry) -> None:
        entry.last_access = self._clock()
        self._entries.move_to_end(entry.ns)

    def _remove(self, ns: Namespace) -> int:
        entry = self._entries.pop(ns)
        self._bytes -= entry.nbytes
        return len(entry.layers)

    def plan_room(self, need: int, protect: tuple[str, ...] = ()) -> tuple[int, Callable[[], None]]:
        """For the V-store's writes: state-only namespaces (LRU first, none named by a protected
        session ``<ns>_pk``/``<ns>_pv``) freeing ``need`` bytes, or all there are; returns the bytes
        they hold and a callback that evicts them (called only once the write is sure to fit)."""
        protected = {sid[:-len(K_SUFFIX)] for sid in protect if sid.endswith((K_SUFFIX, V_SUFFIX))}
        victims: list[str] = []
        freed = 0
        for ns, entry in self._entries.items():
            if freed >= need:
                break
            if ns in protected or self.has_kv(ns):
                continue
            victims.append(ns)
            freed += entry.nbytes
        return freed, lambda: self.evict(victims)

    def _make_room(self, extra: int, protect: Namespace) -> None:
        """State-only LRU victims first, then K/V groups via the V-store; nothing evicted on OOM."""
        if self.max_bytes <= 0 or extra <= 0 or self.used_bytes() + extra <= self.max_bytes:
            return
        over = self.used_bytes() + extra - self.max_bytes
        victims: list[str] = []
        freed = 0
        for ns, entry in self._entries.items():
            if freed >= over:
                break
            if ns == protect or self.has_kv(ns):
                continue
            victims.append(ns)
            freed += entry.nbytes
        if freed < over:
            if self.make_kv_room is None:
                raise CommandError("command not allowed when used memory > 'maxmemory'.", code="OOM")
            # Asks for room net of the planned victims; raises OOM (evicting nothing) if short.
            self.make_kv_room(extra - freed, protect)
        self.evict(victims)
