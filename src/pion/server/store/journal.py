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

from collections.abc import Callable
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

    def log_set(self, key: bytes, value: bytes, expire_at_ms: int | None) -> None:
        """A plain SET of database 0 (``SetLogger``): nothing to log, no record to build."""
        return None


# A journal may also offer ``log_set(key, value, expire_at_ms)``: the ``KeySet`` record of
# database 0 logged without building the record object (the hot path of a pipelined SET).
# It must log exactly what ``append(KeySet(key, value, expire_at_ms))`` would; a journal
# without it (the tests' recording journals) gets the record.
SetLogger = Callable[[bytes, bytes, int | None], None]
