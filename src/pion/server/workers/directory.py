"""The cross-worker directory: which worker owns a V-store session, a prefix, an ATTEND key.

``pion-server -w N`` keeps V-store data in the worker that created it; every worker must
still answer ``KV.PREFIX.LOOKUP`` for any namespace and tell a client where a session lives.
This table is the one piece of state the workers share: an anonymous shared memory mapping
(``mmap(-1, MAP_SHARED)``, what ``multiprocessing.shared_memory`` is without a name) created by
the parent before it forks the workers. Children inherit the mapping, a restarted worker gets it
again, and the kernel frees it when the last process exits — nothing is left in /dev/shm even
after a SIGKILL, and no resource-tracker process runs beside the workers. No external service.

Layout (little-endian; a 64-byte header, then ``n_slots`` 64-byte slots, open addressing
with linear probing and tombstones)::

    header  0 magic b"PIONDIR1"  8 u32 n_slots  12 u32 format version (1)  16..63 zero
    slot    0 u8 state (0 empty, 1 live, 2 tombstone)   1 u8 owner worker   2 u8 kind
            3 u8 flags (bit 0: prefix complete = LOOKUP hits)   4 u32 schema length
            8 u64 token count   16 f64 prefill_ms (NaN: none)   24 16-byte blake2b of the key
            40 24 bytes schema text (``fp16`` or ``k=fp16,..;v=...``, cut to 24 bytes)

Example: ``KV.PREFIX.REGISTER app|a 128 fp16 LAYERS 2`` on worker 1, then its rows, gives the
slot ``01 01 02 01 04000000 <tokens u64> <nan> blake2b(b"p:app|a") b"fp16" + 20 zero bytes``.

Keys are ``p:<ns>`` (a KV.PREFIX namespace), ``s:<sid>`` (a V-store session) and ``a:<sid>``
(an ATTEND.PREFIX key); only their digest is stored, so a name of any length fits a slot.
Only a key's owner writes its slot; every access holds an ``flock`` on ``pion.directory.lock``
in the data directory (each worker opens its own descriptor, so the lock is per process and
the kernel releases it if the worker dies holding it).
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
import mmap
from pathlib import Path

MAGIC = b"PIONDIR1"
FORMAT_VERSION = 1
HEADER_BYTES = 64
SLOT_BYTES = 64
SCHEMA_BYTES = 24
LOCK_FILE = "pion.directory.lock"
_HEADER = struct.Struct("<8sII")
_SLOT = struct.Struct("<BBBBIQd16s24s")
EMPTY, LIVE, TOMBSTONE = 0, 1, 2
KIND_SESSION, KIND_PREFIX, KIND_ATTEND = 1, 2, 3
_KIND_TAGS = {KIND_SESSION: b"s:", KIND_PREFIX: b"p:", KIND_ATTEND: b"a:"}


class DirectoryFull(Exception):
    """Every slot is live: a new name cannot be published (``--directory-slots``)."""


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One published name: who owns it and what LOOKUP / INFO need to answer without it."""

    owner: int
    kind: int
    complete: bool
    tokens: int
    prefill_ms: float | None
    schema: str


def directory_key(kind: int, name: str) -> bytes:
    """The 16-byte digest a name is stored under (``p:``/``s:``/``a:`` + the name)."""
    raw = _KIND_TAGS[kind] + name.encode("utf-8", "surrogateescape")
    return hashlib.blake2b(raw, digest_size=16).digest()


class Directory:
    """The shared table, seen from one process (see the module docstring)."""

    def __init__(self, shm: mmap.mmap, lock_path: Path) -> None:
        self._shm = shm
        buf = memoryview(shm)
        self._buf = buf
        magic, n_slots, version = _HEADER.unpack_from(buf, 0)
        if magic != MAGIC or version != FORMAT_VERSION:
            raise ValueError("shared memory block is not a Pion directory")
        self.n_slots = int(n_slots)
        self._lock_path = lock_path
        self._lock_fd: int | None = None
        self._lock_pid = -1

    @classmethod
    def create(cls, n_slots: int, data_dir: Path) -> Directory:
        """A new, empty table (the parent process; workers inherit it across fork)."""
        shm = mmap.mmap(-1, HEADER_BYTES + n_slots * SLOT_BYTES, flags=mmap.MAP_SHARED)  # zero-filled
        _HEADER.pack_into(shm, 0, MAGIC, n_slots, FORMAT_VERSION)
        lock_path = data_dir / LOCK_FILE
        lock_path.touch(exist_ok=True)
        return cls(shm, lock_path)

    def destroy(self) -> None:
        """Unmap the table in this process (the parent, after every worker exited)."""
        self._buf.release()
        self._shm.close()

    # ---- locking ----------------------------------------------------------------------
    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        if self._lock_fd is None or self._lock_pid != os.getpid():
            # A forked worker opens its own descriptor: flock on an inherited one is shared.
            self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            self._lock_pid = os.getpid()
        fd = self._lock_fd
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    # ---- slots ------------------------------------------------------------------------
    def _offset(self, index: int) -> int:
        return HEADER_BYTES + index * SLOT_BYTES

    def _probe(self, digest: bytes) -> Iterator[int]:
        start = int.from_bytes(digest[:8], "little") % self.n_slots
        for i in range(self.n_slots):
            yield (start + i) % self.n_slots

    def _find(self, digest: bytes) -> int | None:
        buf = self._buf
        for index in self._probe(digest):
            off = self._offset(index)
            state = buf[off]
            if state == EMPTY:
                return None
            if state == LIVE and buf[off + 24: off + 40] == digest:
                return index
        return None

    def get(self, kind: int, name: str) -> DirEntry | None:
        """The entry of ``name``, or None when no worker published it."""
        digest = directory_key(kind, name)
        with self._locked(exclusive=False):
            index = self._find(digest)
            if index is None:
                return None
            return self._read(index)

    def _read(self, index: int) -> DirEntry:
        _, owner, kind, flags, schema_len, tokens, prefill, _, schema = _SLOT.unpack_from(
            self._buf, self._offset(index))
        return DirEntry(owner=owner, kind=kind, complete=bool(flags & 1), tokens=tokens,
                        prefill_ms=None if math.isnan(prefill) else prefill,
                        schema=schema[:schema_len].decode("utf-8", "replace"))

    def publish(self, kind: int, name: str, owner: int, *, complete: bool = False, tokens: int = 0,
                prefill_ms: float | None = None, schema: str = "") -> None:
        """Insert or overwrite ``name``'s entry (raises DirectoryFull)."""
        digest = directory_key(kind, name)
        schema_raw = schema.encode()[:SCHEMA_BYTES]
        with self._locked(exclusive=True):
            index = self._find(digest)
            if index is None:
                index = self._free_slot(digest)
            _SLOT.pack_into(self._buf, self._offset(index), LIVE, owner, kind, 1 if complete else 0,
                            len(schema_raw), tokens, math.nan if prefill_ms is None else prefill_ms,
                            digest, schema_raw)

    def claim(self, kind: int, name: str, owner: int) -> int:
        """Publish ``name`` for ``owner`` unless another worker has it; returns the owner it has.

        Two workers creating one new name at once: the first claim wins, the other redirects.
        """
        digest = directory_key(kind, name)
        with self._locked(exclusive=True):
            index = self._find(digest)
            if index is not None:
                return int(self._buf[self._offset(index) + 1])
            index = self._free_slot(digest)
            _SLOT.pack_into(self._buf, self._offset(index), LIVE, owner, kind, 0, 0, 0, math.nan,
                            digest, b"")
            return owner

    def _free_slot(self, digest: bytes) -> int:
        buf = self._buf
        for index in self._probe(digest):
            if buf[self._offset(index)] != LIVE:
                return index
        raise DirectoryFull(f"the cross-worker directory is full ({self.n_slots} slots; "
                            "raise --directory-slots)")

    def remove(self, kind: int, name: str, owner: int) -> bool:
        """Forget ``name`` if ``owner`` still owns it; True when an entry went."""
        digest = directory_key(kind, name)
        with self._locked(exclusive=True):
            index = self._find(digest)
            if index is None or self._buf[self._offset(index) + 1] != owner:
                return False
            self._bury(index)
            return True

    def _bury(self, index: int) -> None:
        # A slot followed by an empty one ends no probe chain: empty it, and the tombstones
        # before it, so create/drop churn does not leave chains of tombstones behind.
        buf = self._buf
        if buf[self._offset((index + 1) % self.n_slots)] != EMPTY:
            buf[self._offset(index)] = TOMBSTONE
            return
        buf[self._offset(index)] = EMPTY
        prev = (index - 1) % self.n_slots
        while prev != index and buf[self._offset(prev)] == TOMBSTONE:
            buf[self._offset(prev)] = EMPTY
            prev = (prev - 1) % self.n_slots

    def clear_owner(self, owner: int) -> int:
        """Forget every entry of ``owner`` (a worker starting, before it republishes)."""
        removed = 0
        with self._locked(exclusive=True):
            buf = self._buf
            for index in range(self.n_slots):
                off = self._offset(index)
                if buf[off] == LIVE and buf[off + 1] == owner:
                    self._bury(index)
                    removed += 1
        return removed

    def totals(self) -> tuple[int, int]:
        """(complete prefixes, their tokens) across every worker, for KV.PREFIX.INFO."""
        count = tokens = 0
        with self._locked(exclusive=False):
            for index in range(self.n_slots):
                off = self._offset(index)
                if self._buf[off] == LIVE and self._buf[off + 2] == KIND_PREFIX:
                    entry = self._read(index)
                    if entry.complete:
                        count += 1
                        tokens += entry.tokens
        return count, tokens
