"""Resident prefix K/V for ATTEND.PREFIX.*: a warm slot table with LRU demotion to a cold registry.

One entry per ``(sid, layer)``. Three states (original design "Cold-tier state machine"):
  * WARM    — K and V held as fp32 tensors ``[H, N, D]`` in a slot; queries are answered.
  * COLD    — demoted: only ``(H, N, D, last access)`` kept; LOOKUP says +COLD, queries say
              ``-COLDMISS <sid> <layer>`` until KV.PREFIX.WARM rebuilds it from the V-store.
  * MISSING — neither; LOOKUP says +MISS, queries say ``-ERR ... not found``.

The warm table holds ``warm_slots`` entries (256 by default); storing one more demotes the least
recently accessed slot. The cold registry holds ``cold_slots`` entries (1024); its oldest entry
is forgotten (becomes MISSING) when it overflows. A byte budget (``--maxmemory`` less what the
V-store and keyspace use) also demotes LRU slots; a store that cannot fit even after demoting
every other slot is refused with -OOM and changes nothing.

This data is derived, not logged: after a restart every entry is MISSING and KV.PREFIX.WARM
rebuilds it from the V-store, which is persistent. The tensors are opaque here (anything with
``nbytes``-compatible ``numel()``/``element_size()``), so this module does not import torch.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pion.common.errors import CommandError

SlotKey = tuple[str, int]  # (sid, layer)
DEFAULT_WARM_SLOTS = 256
DEFAULT_COLD_SLOTS = 1024


@dataclass
class Slot:
    """A warm entry: K and V tensors ``[n_heads, n_tokens, head_dim]``."""

    keys: Any
    values: Any
    n_heads: int
    n_tokens: int
    head_dim: int
    last_access: float

    @property
    def nbytes(self) -> int:
        return int(self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size())


@dataclass(frozen=True)
class ColdEntry:
    """What stays of a demoted slot: its shape and when it was last used."""

    n_heads: int
    n_tokens: int
    head_dim: int
    last_access: float


class ColdMiss(CommandError):
    """A query hit a demoted entry: ``-COLDMISS <sid> <layer>`` (rehydrate with KV.PREFIX.WARM)."""

    def __init__(self, sid: str, layer: int) -> None:
        super().__init__(f"{sid} {layer}", code="COLDMISS")
        self.sid, self.layer = sid, layer


class SlotNotFound(CommandError):
    """A query named a slot this server never held (or forgot): ``-ERR session ... not found``.
    Its own class so a cold-tier front can answer ``-COLDMISS`` instead when the prefix's
    K/V are in a tier below (pion.server.coldtier.stage2)."""

    def __init__(self, sid: str, layer: int) -> None:
        super().__init__(f"session '{sid}' layer {layer} not found (ATTEND.PREFIX.STORE it first)")
        self.sid, self.layer = sid, layer


class AttendSlots:
    """Warm slots in LRU order plus the cold registry; counters for KV.PREFIX.INFO.

    Args:
        warm_slots: most warm entries held at once.
        cold_slots: most demoted entries remembered.
        free_bytes: bytes the slots may use in total right now (None = unlimited), read per store.
    """

    def __init__(self, warm_slots: int = DEFAULT_WARM_SLOTS, cold_slots: int = DEFAULT_COLD_SLOTS,
                 free_bytes: Callable[[], int | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.warm_slots = warm_slots
        self.cold_slots = cold_slots
        self.free_bytes = free_bytes or (lambda: None)
        self._clock = clock
        self._warm: OrderedDict[SlotKey, Slot] = OrderedDict()
        self._cold: OrderedDict[SlotKey, ColdEntry] = OrderedDict()
        self.nbytes = 0
        self.demotions = 0
        self.rehydrates = 0
        self.torch_loaded = False  # set by the ATTEND family once it has imported torch

    @property
    def n_warm(self) -> int:
        return len(self._warm)

    @property
    def n_cold(self) -> int:
        return len(self._cold)

    def state(self, key: SlotKey) -> str:
        """``HIT`` (warm), ``COLD`` or ``MISS``; does not touch the LRU order."""
        if key in self._warm:
            return "HIT"
        return "COLD" if key in self._cold else "MISS"

    def get(self, key: SlotKey) -> Slot:
        """The warm slot, marked most recently used; ColdMiss / CommandError when not warm."""
        slot = self._warm.get(key)
        if slot is None:
            if key in self._cold:
                raise ColdMiss(*key)
            raise SlotNotFound(*key)
        slot.last_access = self._clock()
        self._warm.move_to_end(key)
        return slot

    def put(self, key: SlotKey, keys: Any, values: Any, n_heads: int, n_tokens: int, head_dim: int) -> None:
        """Store (or replace) a warm slot as the most recent; demotes LRU slots to make room.

        A key that was COLD counts as a rehydrate. Raises CommandError(OOM) with nothing changed
        when the budget cannot hold the new slot even with every other slot demoted.
        """
        slot = Slot(keys, values, n_heads, n_tokens, head_dim, self._clock())
        victims = self._plan_room(key, slot.nbytes)
        for victim in victims:
            self._demote(victim)
        old = self._warm.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        if self._cold.pop(key, None) is not None:
            self.rehydrates += 1
        self._warm[key] = slot
        self.nbytes += slot.nbytes

    def check_fits(self, new_bytes: int) -> None:
        """Raise CommandError(OOM) unless ``new_bytes`` of new slots fit the budget with every slot demoted.

        For multi-slot writes (KV.PREFIX.WARM), so they are refused before the first slot changes.
        """
        budget = self.free_bytes()
        if budget is not None and new_bytes > budget:
            raise CommandError("command not allowed when used memory > 'maxmemory'.", code="OOM")

    def cold_entry(self, key: SlotKey) -> ColdEntry | None:
        return self._cold.get(key)

    def forget(self, sid: str) -> int:
        """Forget every layer of ``sid``, warm and cold (its prefix was dropped or went stale
        in the shared cold tier, docs/scale-out.md); how many entries went."""
        warm = [key for key in self._warm if key[0] == sid]
        for key in warm:
            self.nbytes -= self._warm.pop(key).nbytes
        cold = [key for key in self._cold if key[0] == sid]
        for key in cold:
            del self._cold[key]
        return len(warm) + len(cold)

    def flush(self) -> None:
        """Forget every entry, warm and cold (FLUSHALL)."""
        self._warm.clear()
        self._cold.clear()
        self.nbytes = 0

    def _plan_room(self, key: SlotKey, new_bytes: int) -> list[SlotKey]:
        replaced = self._warm.get(key)
        count = len(self._warm) - (1 if replaced is not None else 0)
        used = self.nbytes - (replaced.nbytes if replaced is not None else 0)
        budget = self.free_bytes()  # bytes all slots together may use
        victims: list[SlotKey] = []
        for other, slot in self._warm.items():
            over_count = count + 1 > self.warm_slots
            over_bytes = budget is not None and used + new_bytes > budget
            if not (over_count or over_bytes):
                break
            if other == key:
                continue
            victims.append(other)
            count -= 1
            used -= slot.nbytes
        if budget is not None and used + new_bytes > budget:
            raise CommandError("command not allowed when used memory > 'maxmemory'.", code="OOM")
        return victims

    def _demote(self, key: SlotKey) -> None:
        slot = self._warm.pop(key)
        self.nbytes -= slot.nbytes
        self._cold[key] = ColdEntry(slot.n_heads, slot.n_tokens, slot.head_dim, slot.last_access)
        self._cold.move_to_end(key)
        self.demotions += 1
        while len(self._cold) > self.cold_slots:
            self._cold.popitem(last=False)
