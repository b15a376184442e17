"""Give freed value memory back to the OS, so RSS follows ``--maxmemory`` (glibc only).

Why: the keyspace holds values of 64 KB-1 MB (LMCache chunks) that eviction frees and new
SETs replace all the time. glibc's malloc serves blocks above ``M_MMAP_THRESHOLD`` (128 KiB at
start) with their own mmap, returned to the OS on free — but each such free *raises* the
threshold (up to 32 MiB), so after the first evictions large values come from the heap, where
freed holes of one size do not fit the next value's size and pages stay resident.

``PION_MALLOC_TUNING`` (environment) chooses, measured side by side in
``benchmarks/bench_malloc_tuning.py`` (docs/benchmarks.md, "RSS under --maxmemory"):

* ``trim`` (default): glibc's own thresholds; ``trim_forever`` calls ``malloc_trim(0)`` at most
  once a second after evictions, after the stores shrank by 4 MiB (DEL, FLUSHALL), or when RSS
  above the stored bytes grew by 4 MiB since the last trim (a fill and a delete between two
  samples leave no shrink to see), handing back whole free pages inside the heap. Costs nothing per request.
* ``memory``: also ``tune()`` — a fixed 64 KiB mmap threshold (every value gets its own
  mapping, unmapped on free), a 128 KiB trim threshold and two arenas, set with ``mallopt`` at
  start-up (``-w N`` workers inherit them). RSS tracks ``--maxmemory`` most tightly (11 MiB
  above it + the idle server at 16 clients vs 31 MiB), but every large SET pays an mmap and its
  page faults: ~2x server CPU per op for 64 KB-1 MB values, so it is not the default.
* ``off``: neither (glibc as it comes; or ``MALLOC_*`` environment variables).

Neither changes what is stored; on a non-glibc libc (musl, macOS) nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
from collections.abc import Callable

log = logging.getLogger("pion.server.allocator")

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 64 * 1024  # every block this big or bigger gets its own mapping, unmapped on free
TRIM_THRESHOLD = 128 * 1024  # free heap top above this goes back to the OS at once
ARENA_MAX = 2  # the event loop + the WAL/fsync thread; more arenas only hold more free memory
TRIM_INTERVAL_S = 1.0
TRIM_MIN_SHRINK = 4 * 1024 * 1024  # trim once the stores shrank by this much since the last trim


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018  (glibc has both; musl/macOS do not)
        libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def available() -> bool:
    """True when the C library is glibc (``mallopt`` and ``malloc_trim`` exist)."""
    return _LIBC is not None


MODES = ("trim", "memory", "off")


def mode() -> str:
    """``PION_MALLOC_TUNING``: ``trim`` (the default; an unknown value too), ``memory`` or ``off``."""
    value = os.environ.get("PION_MALLOC_TUNING", "trim")
    return value if value in MODES else "trim"


def tune() -> bool:
    """Under ``PION_MALLOC_TUNING=memory``: set the mmap threshold, trim threshold and arena
    count; True when applied."""
    if _LIBC is None or mode() != "memory":
        return False
    ok = all(_LIBC.mallopt(param, value) == 1 for param, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_ARENA_MAX, ARENA_MAX)))
    if not ok:
        log.warning("mallopt refused a setting: RSS may run above --maxmemory by more than stated")
    return ok


def trim() -> bool:
    """``malloc_trim(0)``: True when glibc released memory to the OS."""
    return _LIBC is not None and bool(_LIBC.malloc_trim(0))


def rss_bytes() -> int:
    """This process's resident set (``/proc/self/statm``); 0 where there is no procfs."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


async def trim_forever(used_bytes: Callable[[], int], evictions: Callable[[], int],
                       interval_s: float = TRIM_INTERVAL_S) -> None:
    """Each ``interval_s``: trim when something was evicted, the stores shrank by
    ``TRIM_MIN_SHRINK`` since the last trim (DEL, FLUSHALL, expiry), or the RSS the stores do not
    account for grew by that much (values stored and deleted between two samples)."""
    if _LIBC is None or mode() == "off":
        return
    high, evicted = used_bytes(), evictions()
    slack_floor = rss_bytes() - high
    while True:
        await asyncio.sleep(interval_s)
        used, now_evicted = used_bytes(), evictions()
        slack = rss_bytes() - used
        if (now_evicted != evicted or high - used >= TRIM_MIN_SHRINK
                or slack - slack_floor >= TRIM_MIN_SHRINK):
            trim()
            high, evicted = used, now_evicted
            slack_floor = rss_bytes() - used
        else:
            high = max(high, used)
            slack_floor = min(slack_floor, slack)
