"""The one hook through which every store logs a mutation before applying it.

Every store (``VStore``, ``Keyspace``, ``SemanticCacheStore``, ``SearchStore``,
``SsmStateStore``) holds a ``journal`` and calls ``journal.append(record)`` exactly once
per mutation, *after* validating the request (so a refused command logs nothing) and
*before* changing any state (so the log is never behind what a client was told).
``record`` is one of the classes in ``store/records.py``, which also say how each is
replayed. The persistence layer supplies the real journal (``persist/binding.WalJournal``);
``NullJournal`` — what a store starts with, and what recovery replays into — does nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pion.server.store.records import Record


class Journal(Protocol):
    """Receives one record per mutation, before it is applied.

    Raising from ``append`` aborts the mutation: nothing is changed and the error
    propagates to the command (``CommandError(..., code="MISCONF")`` when the WAL
    cannot be written).
    """

    def append(self, record: Record) -> None:
        ...

    @property
    def durable(self) -> bool:
        """True when records reach a log (INFO's ``persisted``)."""
        ...


class NullJournal:
    """No persistence: records go nowhere."""

    durable = False

    def append(self, record: Record) -> None:
        return None
