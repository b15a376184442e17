"""The binary-safe string keyspace (SET/GET/... — what LMCache's ``redis://`` backend uses).

Keys and values are ``bytes`` kept as received (no copy after parsing). Expiry deadlines
are absolute unix milliseconds in a side dict, checked lazily on access and sampled
periodically (Redis's active expiry: sample 20 keys with a TTL, repeat while more than a
quarter were expired, within a small time budget).

Every mutation goes through one method (``set``, ``delete``, ``expire``, ``flush``) that
first hands its record (``KeySet``, ``KeysDel``, ``KeyExpire``, ``KeysFlush`` of
``store/records.py``; ``KeyHSet``/``KeyHDel`` for hashes) to ``journal.append`` and then
applies the change, so persistence logs exactly what clients were told. Deleting an expired key is not logged: deadlines
are absolute, so a replayed key expires on its own (and a GET of an expired key keeps
working while the WAL is refusing writes).

Values are ``bytes`` (strings) or ``dict[bytes, bytes]`` (hashes, HSET...); a hash whose
last field goes is removed, like Redis. ``watchers`` are told about every hash change
(the FT.* indexes keep themselves current through it): ``watcher(key, fields | None)``
after the change, None when the key no longer holds a hash; FLUSHALL calls each of
``flush_hooks`` once instead (RediSearch drops every index on FLUSHALL, live and replayed).

``used_bytes`` approximates the memory the keyspace holds (keys + values + a fixed
per-entry overhead); the V-store's maxmemory policy adds it to its own bytes.

One ``Keyspace`` per numbered database (``SELECT n``; ``Stores.dbs``): ``db`` is its number,
and a database n > 0 logs each mutation as its record's ``*Db`` twin (``Record.in_db``).
While ``--maxmemory-policy`` can evict, ``tracker`` (``store/key_tracking.py``) follows every
key's insertion, removal, TTL and access; otherwise it is None and costs nothing.
``rename``/``take``/``put``/``swap_with`` move values without copying them (RENAME, MOVE,
COPY, SWAPDB): ``rename`` logs itself, the cross-database moves are logged by ``Stores``.
"""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Callable, Iterator

from pion.server.store.batch_clock import now_ms as now_ms  # (re-exported: commands use it)
from pion.server.store.glob import compile_glob
from pion.server.store.journal import Journal, NullJournal, SetLogger
from pion.server.store.key_tracking import KeyTracker
from pion.server.store.records import (KeyExpire, KeyHDel, KeyHSet, KeyRename, KeysDel, KeySet, KeysFlush,
                                       Record)

ENTRY_OVERHEAD_BYTES = 96  # dict slot + two bytes objects' headers, roughly
FIELD_OVERHEAD_BYTES = 80  # a hash field: dict slot + two bytes objects' headers, roughly

Hash = dict[bytes, bytes]
Value = bytes | Hash
HashWatcher = Callable[[bytes, "Hash | None"], None]


class WrongTypeError(Exception):
    """The key holds another kind of value (the command family turns it into -WRONGTYPE)."""


def value_bytes(value: Value) -> int:
    """What a value counts toward ``used_bytes`` (a hash: its fields and their overhead)."""
    if isinstance(value, bytes):
        return len(value)
    return sum(len(f) + len(v) + FIELD_OVERHEAD_BYTES for f, v in value.items())


def entry_bytes(key: bytes, value: Value) -> int:
    """What one entry counts toward ``used_bytes``."""
    return len(key) + value_bytes(value) + ENTRY_OVERHEAD_BYTES


class Keyspace:
    """Binary keys to binary values with optional millisecond expiry."""

    def __init__(self, journal: Journal | None = None, db: int = 0) -> None:
        self.db = db
        self._journal: Journal = NullJournal()
        self._log_set: SetLogger | None = None
        self.journal = journal if journal is not None else NullJournal()
        self.tracker: KeyTracker | None = None
        self._data: dict[bytes, Value] = {}
        self._expires: dict[bytes, int] = {}
        self._seq: dict[bytes, int] = {}  # insertion sequence, increasing in dict order (SCAN)
        self._next_seq = 1
        self.used_bytes = 0
        self.expired_keys = 0
        self.watchers: list[HashWatcher] = []
        self.flush_hooks: list[Callable[[], None]] = []

    @property
    def journal(self) -> Journal:
        """Where mutations are logged before they are applied (``store/journal.py``)."""
        return self._journal

    @journal.setter
    def journal(self, journal: Journal) -> None:
        self._journal = journal
        # A plain SET of database 0 goes through the journal's record-free ``log_set`` when it
        # has one (the WAL's and NullJournal's: same bytes, no KeySet object per SET).
        log_set = getattr(journal, "log_set", None)
        self._log_set = log_set if not self.db else None

    # ---- reads ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._data)

    @property
    def n_expires(self) -> int:
        return len(self._expires)

    def get(self, key: bytes) -> Value | None:
        """The value, or None when absent or expired (an expired key is removed)."""
        if self._expires and key in self._expires and self._expire_if_due(key):
            return None
        value = self._data.get(key)
        if self.tracker is not None and value is not None:
            self.tracker.touch(key)
        return value

    def get_string(self, key: bytes) -> bytes | None:
        """A string value or None; WrongTypeError when the key holds a hash."""
        value = self.get(key)
        if value is not None and type(value) is not bytes:
            raise WrongTypeError(key)
        return value

    def get_hash(self, key: bytes) -> Hash | None:
        """A hash (the live dict: do not mutate) or None; WrongTypeError for a string."""
        value = self.get(key)
        if value is not None and type(value) is not dict:
            raise WrongTypeError(key)
        return value

    def type_of(self, key: bytes) -> str:
        """Redis TYPE: ``string``, ``hash`` or ``none``."""
        value = self.get(key)
        if value is None:
            return "none"
        return "string" if type(value) is bytes else "hash"

    def peek(self, key: bytes) -> Value | None:
        """The stored value, expired or not, without touching it (eviction's look)."""
        return self._data.get(key)

    def contains(self, key: bytes) -> bool:
        return self.get(key) is not None

    def expire_at_ms(self, key: bytes) -> int | None:
        """Absolute deadline of a live key, or None when it has no TTL."""
        return self._expires.get(key)

    def ttl_ms(self, key: bytes) -> int:
        """Redis PTTL semantics: -2 missing, -1 no TTL, else milliseconds left."""
        if self.get(key) is None:
            return -2
        deadline = self._expires.get(key)
        if deadline is None:
            return -1
        return max(0, deadline - now_ms())

    def key_names(self) -> list[bytes]:
        """Every stored key name, live or not yet expired-and-removed (a snapshot list)."""
        return list(self._data)

    def keys(self, pattern: bytes = b"*") -> list[bytes]:
        self._expire_all_due()
        if pattern == b"*":
            return list(self._data)
        regex = compile_glob(pattern)
        return [k for k in self._data if regex.match(k)]

    def scan(self, cursor: int, count: int, pattern: bytes | None = None) -> tuple[int, list[bytes]]:
        """Up to ``count`` keys inserted at or after ``cursor``; returns (next cursor, keys).

        Cursors are insertion sequence numbers, so a key present for a whole iteration is
        returned exactly once even if others are added or deleted meanwhile; 0 = done.
        """
        order = list(self._data)
        seq = self._seq
        start = bisect.bisect_left(order, cursor, key=seq.__getitem__) if cursor > 0 else 0
        batch = order[start:start + count]
        next_cursor = seq[order[start + count]] if start + count < len(order) else 0
        now = now_ms()
        live = [k for k in batch if k not in self._expires or self._expires[k] > now]
        if pattern is not None and pattern != b"*":
            regex = compile_glob(pattern)
            live = [k for k in live if regex.match(k)]
        return next_cursor, live

    def snapshot_entry(self, key: bytes) -> tuple[Value, int | None] | None:
        """(value, expire_at_ms) of a live key, None when it is gone or expired — for snapshots."""
        value = self._data.get(key)
        if value is None:
            return None
        deadline = self._expires.get(key)
        if deadline is not None and deadline <= now_ms():
            return None
        return value, deadline

    def items(self) -> Iterator[tuple[bytes, Value, int | None]]:
        """(key, value, expire_at_ms) of every live key — for snapshots."""
        now = now_ms()
        for key, value in self._data.items():
            deadline = self._expires.get(key)
            if deadline is None or deadline > now:
                yield key, value, deadline

    # ---- mutations (journaled, then applied) ----------------------------------------------
    def set(self, key: bytes, value: bytes, expire_at_ms: int | None = None,
            keep_ttl: bool = False) -> None:
        """Store ``value``; the TTL becomes ``expire_at_ms`` (or stays, with ``keep_ttl``)."""
        if keep_ttl:
            expire_at_ms = self._expires.get(key) if key in self._data else None
        log_set = self._log_set
        if log_set is not None:
            log_set(key, value, expire_at_ms)
        else:
            self._log(KeySet(key, value, expire_at_ms))
        old = self._data.get(key)
        if old is None:
            self._seq[key] = self._next_seq
            self._next_seq += 1
            self.used_bytes += entry_bytes(key, value)
            if self.tracker is not None:
                self.tracker.added(key, expire_at_ms is not None)
        else:
            if type(old) is bytes:
                self.used_bytes += len(value) - len(old)
            else:
                self.used_bytes += len(value) - value_bytes(old)
            if self.tracker is not None:
                self.tracker.touch(key)
                self.tracker.ttl_changed(key, expire_at_ms is not None)
        self._data[key] = value
        if expire_at_ms is None:
            if self._expires:
                self._expires.pop(key, None)
        else:
            self._expires[key] = expire_at_ms
        if type(old) is dict and self.watchers:
            self._notify(key, None)

    def hset(self, key: bytes, pairs: list[bytes]) -> int:
        """Set hash fields (``pairs`` = field, value, ...); returns how many were new.

        WrongTypeError (nothing logged) when the key holds a string. The TTL is kept.
        """
        current = self.get_hash(key)
        self._log(KeyHSet(key, pairs))
        if current is None:
            current = {}
            self._data[key] = current
            self._seq[key] = self._next_seq
            self._next_seq += 1
            self.used_bytes += len(key) + ENTRY_OVERHEAD_BYTES
            if self.tracker is not None:
                self.tracker.added(key, key in self._expires)
        added = 0
        for i in range(0, len(pairs), 2):
            field, value = pairs[i], pairs[i + 1]
            old = current.get(field)
            if old is None:
                added += 1
                self.used_bytes += len(field) + len(value) + FIELD_OVERHEAD_BYTES
            else:
                self.used_bytes += len(value) - len(old)
            current[field] = value
        if self.watchers:
            self._notify(key, current)
        return added

    def hdel(self, key: bytes, fields: list[bytes]) -> int:
        """Remove hash fields; the key goes with its last field. Returns how many went."""
        current = self.get_hash(key)
        if current is None:
            return 0
        present = [f for f in dict.fromkeys(fields) if f in current]
        if not present:
            return 0
        self._log(KeyHDel(key, present))
        for field in present:
            value = current.pop(field)
            self.used_bytes -= len(field) + len(value) + FIELD_OVERHEAD_BYTES
        if not current:
            self._remove(key)  # tells the watchers
        elif self.watchers:
            self._notify(key, current)
        return len(present)

    def delete(self, keys: list[bytes]) -> int:
        """Remove the live keys among ``keys``; returns how many were removed."""
        present = [k for k in dict.fromkeys(keys) if self.get(k) is not None]
        if not present:
            return 0
        self._log(KeysDel(present))
        for key in present:
            self._remove(key)
        return len(present)

    def evict(self, key: bytes) -> None:
        """Remove a present key for room (``--maxmemory-policy``), logged as a DEL."""
        self._log(KeysDel([key]))
        self._remove(key)

    def expire(self, key: bytes, expire_at_ms: int | None) -> bool:
        """Set (or with None remove) a live key's deadline; a past deadline deletes it."""
        if self.get(key) is None:
            return False
        if expire_at_ms is not None and expire_at_ms <= now_ms():
            self.delete([key])
            return True
        self._log(KeyExpire(key, expire_at_ms))
        if expire_at_ms is None:
            self._expires.pop(key, None)
        else:
            self._expires[key] = expire_at_ms
        if self.tracker is not None:
            self.tracker.ttl_changed(key, expire_at_ms is not None)
        return True

    def flush(self) -> None:
        """Remove every key (FLUSHALL)."""
        self._log(KeysFlush())
        self._data.clear()
        self._expires.clear()
        self._seq.clear()
        self.used_bytes = 0
        if self.tracker is not None:
            self.tracker = KeyTracker(self.tracker.mode, self.tracker.clock)
        for hook in self.flush_hooks:
            hook()

    def rename(self, src: bytes, dst: bytes) -> None:
        """RENAME a live ``src`` over ``dst`` (replaced); the value and its TTL travel."""
        self._log(KeyRename(self.db, src, dst))
        value, deadline = self.take(src)
        if dst in self._data:
            self._remove(dst)
        self.put(dst, value, deadline)

    def take(self, key: bytes) -> tuple[Value, int | None]:
        """Remove a present key without logging; its value (not copied) and deadline."""
        value = self._data[key]
        deadline = self._expires.get(key)
        self._remove(key)
        return value, deadline

    def put(self, key: bytes, value: Value, deadline: int | None) -> None:
        """Insert ``key`` without logging (the caller logged the move); a key still there
        (expired live, not yet on replay) is replaced."""
        if key in self._data:
            self._remove(key)
        self._data[key] = value
        self._seq[key] = self._next_seq
        self._next_seq += 1
        self.used_bytes += entry_bytes(key, value)
        if deadline is not None:
            self._expires[key] = deadline
        if self.tracker is not None:
            self.tracker.added(key, deadline is not None)
        if type(value) is dict and self.watchers:
            self._notify(key, value)

    def swap_with(self, other: Keyspace) -> None:
        """SWAPDB: exchange every key with ``other`` (not logged: ``Stores.swap_dbs`` is).
        Hash watchers (the FT indexes, on database 0) hear every hash that left or arrived."""
        mine = [k for k, v in self._data.items() if type(v) is dict]
        theirs = [k for k, v in other._data.items() if type(v) is dict]
        for attr in ("_data", "_expires", "_seq", "_next_seq", "used_bytes", "tracker"):
            mine_value, their_value = getattr(self, attr), getattr(other, attr)
            setattr(self, attr, their_value)
            setattr(other, attr, mine_value)
        for ks, left, arrived in ((self, mine, theirs), (other, theirs, mine)):
            if ks.watchers:
                for key in left:
                    ks._notify(key, None)
                for key in arrived:
                    ks._notify(key, ks._data[key])  # type: ignore[arg-type]

    def set_tracker(self, tracker: KeyTracker | None) -> None:
        """Start (every present key enters the pools, stamped now) or stop eviction tracking."""
        if tracker is not None:
            for key in self._data:
                tracker.added(key, key in self._expires)
        self.tracker = tracker

    def _log(self, record: Record) -> None:
        self._journal.append(record if not self.db else record.in_db(self.db))

    # ---- expiry --------------------------------------------------------------------------
    def active_expire_cycle(self, budget_s: float = 0.001, sample: int = 20) -> int:
        """Remove expired keys by sampling (Redis's active expiry); returns how many went."""
        removed = 0
        deadline = time.perf_counter() + budget_s
        while self._expires and time.perf_counter() < deadline:
            keys = list(self._expires)
            picks = random.sample(keys, min(sample, len(keys)))
            now = now_ms()
            due = [k for k in picks if self._expires[k] <= now]
            if due:
                self.delete_expired(due)
                removed += len(due)
            if len(due) * 4 <= len(picks):
                break
        return removed

    def delete_expired(self, keys: list[bytes]) -> None:
        """Remove keys whose deadline has passed (not logged: replay expires them itself)."""
        for key in keys:
            self._remove(key)
        self.expired_keys += len(keys)

    def expire_due(self) -> None:
        """Remove every key whose deadline has passed (FT.SEARCH calls it so an expired
        hash is never a hit: O(keys with a TTL))."""
        self._expire_all_due()

    def _expire_if_due(self, key: bytes) -> bool:
        if self._expires[key] <= now_ms():
            self.delete_expired([key])
            return True
        return False

    def _expire_all_due(self) -> None:
        if not self._expires:
            return
        now = now_ms()
        due = [k for k, t in self._expires.items() if t <= now]
        if due:
            self.delete_expired(due)

    def _remove(self, key: bytes) -> None:
        value = self._data.pop(key)
        self.used_bytes -= entry_bytes(key, value)
        self._expires.pop(key, None)
        del self._seq[key]
        if self.tracker is not None:
            self.tracker.removed(key)
        if type(value) is dict and self.watchers:
            self._notify(key, None)

    def _notify(self, key: bytes, fields: Hash | None) -> None:
        for watcher in self.watchers:
            watcher(key, fields)
