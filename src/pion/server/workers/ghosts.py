"""The ``--admission 2hit`` ghost list shared by the workers of ``pion-server -w N``.

Under ``2hit`` the first ``KV.PREFIX.REGISTER`` of a namespace is deferred and its name kept in
a ghost list; the second is admitted (``server/admission.py``). With one list per worker, a
namespace first seen on worker 0 and then on worker 1 would be deferred twice — the kernel
spreads connections over the workers, so that is the common case. This list is the group's:
a ring of name digests in an anonymous shared memory mapping created by the parent before it
forks (like the cross-worker directory, ``directory.py``: children inherit it, a restarted
worker gets it back, the kernel frees it with the last process, nothing in /dev/shm).

Layout (little-endian; a 64-byte header, then ``window`` 16-byte slots)::

    header  0 magic b"PIONGHO1"  8 u32 window  12 u32 format version (1)
            16 u64 deferrals so far (the ring's write position)  24 u64 live entries
            32 u64 evictions (names overwritten before their second registration)  40..63 zero
    slot    a 16-byte blake2b of the namespace (all zero: empty)

Eviction, bounded and exact: a deferral writes its digest at ``deferrals % window`` — the slot
of the deferral ``window`` deferrals ago — so a name is remembered for the next ``window``
first sightings (group-wide) and then forgotten, oldest first; an admission zeroes its slot.
Size: ``--admission-window`` × 16 bytes + 64 (1 MiB for the default 65536). A lookup is one
``mmap.find`` of the digest (C speed, ~0.1 ms at the default window; it runs on REGISTER only),
checked for slot alignment. Every access holds an ``flock`` on ``pion.admission.lock`` in the
data directory (per process; the kernel releases it if a worker dies holding it).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAGIC = b"PIONGHO1"
FORMAT_VERSION = 1
HEADER_BYTES = 64
SLOT_BYTES = 16
LOCK_FILE = "pion.admission.lock"
_HEADER = struct.Struct("<8sIIQQQ")
_COUNTERS = struct.Struct("<QQQ")  # deferrals, live, evictions at offset 16
_EMPTY = bytes(SLOT_BYTES)


def ghost_key(ns: str) -> bytes:
    """The 16-byte digest a namespace is kept under (never all zero in practice: 2^-128)."""
    return hashlib.blake2b(b"g:" + ns.encode("utf-8", "surrogateescape"), digest_size=SLOT_BYTES).digest()


class SharedGhosts:
    """The shared ring, seen from one process (module docstring)."""

    def __init__(self, shm: mmap.mmap, lock_path: Path) -> None:
        magic, window, version, *_ = _HEADER.unpack_from(shm, 0)
        if magic != MAGIC or version != FORMAT_VERSION:
            raise ValueError("shared memory block is not a Pion ghost list")
        self._shm = shm
        self.window = int(window)
        self._lock_path = lock_path
        self._lock_fd: int | None = None
        self._lock_pid = -1

    @classmethod
    def create(cls, window: int, data_dir: Path) -> SharedGhosts:
        """A new, empty ring (the parent process; workers inherit it across fork)."""
        if window < 1:
            raise ValueError(f"admission window must be >= 1, got {window}")
        shm = mmap.mmap(-1, HEADER_BYTES + window * SLOT_BYTES, flags=mmap.MAP_SHARED)  # zero-filled
        _HEADER.pack_into(shm, 0, MAGIC, window, FORMAT_VERSION, 0, 0, 0)
        lock_path = data_dir / LOCK_FILE
        lock_path.touch(exist_ok=True)
        return cls(shm, lock_path)

    def destroy(self) -> None:
        """Unmap the ring in this process (the parent, after every worker exited)."""
        self._shm.close()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if self._lock_fd is None or self._lock_pid != os.getpid():
            # A forked worker opens its own descriptor: flock on an inherited one is shared.
            self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            self._lock_pid = os.getpid()
        fd = self._lock_fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _find(self, digest: bytes) -> int | None:
        """The slot holding ``digest``, or None (a match must start on a slot boundary)."""
        shm, end = self._shm, HEADER_BYTES + self.window * SLOT_BYTES
        at = shm.find(digest, HEADER_BYTES, end)
        while at >= 0:
            if (at - HEADER_BYTES) % SLOT_BYTES == 0:
                return (at - HEADER_BYTES) // SLOT_BYTES
            at = shm.find(digest, at + 1, end)
        return None

    def _counters(self) -> tuple[int, int, int]:
        deferrals, live, evictions = _COUNTERS.unpack_from(self._shm, 16)
        return int(deferrals), int(live), int(evictions)

    def sight(self, ns: str) -> bool:
        """One REGISTER of a namespace no worker holds: True (defer it; it is now a ghost) on the
        first sighting, False when it is a ghost already (admit it; it stays until ``admitted``,
        so a registration that then fails is not lost from the list)."""
        digest = ghost_key(ns)
        with self._locked():
            if self._find(digest) is not None:
                return False
            deferrals, live, evictions = self._counters()
            off = HEADER_BYTES + (deferrals % self.window) * SLOT_BYTES
            if self._shm[off:off + SLOT_BYTES] != _EMPTY:
                evictions += 1  # the name deferred ``window`` deferrals ago is forgotten
            else:
                live += 1
            self._shm[off:off + SLOT_BYTES] = digest
            _COUNTERS.pack_into(self._shm, 16, deferrals + 1, live, evictions)
            return True

    def admitted(self, ns: str) -> None:
        """``ns`` was registered (on any worker): it leaves the list."""
        digest = ghost_key(ns)
        with self._locked():
            index = self._find(digest)
            if index is not None:
                off = HEADER_BYTES + index * SLOT_BYTES
                self._shm[off:off + SLOT_BYTES] = _EMPTY
                deferrals, live, evictions = self._counters()
                _COUNTERS.pack_into(self._shm, 16, deferrals, live - 1, evictions)

    def clear(self) -> None:
        """Forget every ghost (FLUSHALL); the eviction count stays, like a receipt counter."""
        with self._locked():
            self._shm[HEADER_BYTES:HEADER_BYTES + self.window * SLOT_BYTES] = bytes(self.window * SLOT_BYTES)
            deferrals, _, evictions = self._counters()
            _COUNTERS.pack_into(self._shm, 16, deferrals, 0, evictions)

    @property
    def entries(self) -> int:
        with self._locked():
            return self._counters()[1]

    @property
    def evictions(self) -> int:
        with self._locked():
            return self._counters()[2]
