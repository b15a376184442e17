"""Keep this pion-llm's lineages under a byte budget by evicting least-recently-used leaf segments.

The V-store's own LRU goes by last access alone, and for a lineage that is the root: it is written
once and never touched while the leaf grows (original design, KV.PREFIX.DROP). So pion-llm runs its own policy
over the segments it stored or restored: every use touches the whole chain, root to leaf, and only
a segment with no known children may go. An interior segment is never dropped while a descendant
is held, so no held leaf ever loses a segment it needs; dropping a leaf can make its parent a leaf.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from pion.common.ids import Namespace


@dataclass
class _Entry:
    parent: Namespace | None
    n_bytes: int
    children: set[Namespace] = field(default_factory=set)


class LruLeafBudget:
    """An index of held segments in recency order with leaf-only eviction.

    Not thread-safe: pion-llm touches it only from its single model worker.
    """

    def __init__(self, max_bytes: int | None) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Namespace, _Entry] = OrderedDict()
        self.total_bytes = 0

    def __contains__(self, ns: object) -> bool:
        return ns in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def touch_chain(self, chain: Iterable[tuple[Namespace, Namespace | None, int]]) -> None:
        """Record that a chain (root first; ``(ns, parent, n_bytes)``) was just used or stored."""
        for ns, parent, n_bytes in chain:
            entry = self._entries.get(ns)
            if entry is None:
                entry = _Entry(parent, n_bytes)
                self._entries[ns] = entry
                self.total_bytes += n_bytes
                if parent is not None and parent in self._entries:
                    self._entries[parent].children.add(ns)
            self._entries.move_to_end(ns)

    def forget(self, ns: Namespace) -> None:
        """Drop ``ns`` from the index (it was found missing on the server)."""
        entry = self._entries.pop(ns, None)
        if entry is None:
            return
        self.total_bytes -= entry.n_bytes
        if entry.parent is not None and entry.parent in self._entries:
            self._entries[entry.parent].children.discard(ns)
        for child in entry.children:
            if child in self._entries:
                self._entries[child].parent = None

    def victims(self) -> list[Namespace]:
        """Leaves to drop, least recently used first, until the held bytes fit the budget.

        The returned segments are already removed from the index; the caller drops them.
        """
        if self.max_bytes is None:
            return []
        out: list[Namespace] = []
        while self.total_bytes > self.max_bytes:
            leaf = next((ns for ns, e in self._entries.items() if not e.children), None)
            if leaf is None:
                break
            self.forget(leaf)
            out.append(leaf)
        return out

    def is_leaf(self, ns: Namespace) -> bool:
        entry = self._entries.get(ns)
        return entry is not None and not entry.children
