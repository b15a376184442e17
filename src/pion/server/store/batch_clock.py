"""The wall clock in milliseconds for TTL checks, read once per request batch.

Redis reads its clock once per command and expires keys against that cached ``mstime``
rather than asking the kernel at every TTL check. pion-server does the same per batch: the
network layer opens a batch before it runs the requests of one read (``net.py``
``Connection._process``) and closes it after; inside, the first ``now_ms()`` reads the clock
and every later TTL check of that batch gets the same millisecond. A batch lasts
microseconds (pipelined small commands), and nothing in it waits, so a key is never kept
past its deadline by more than that. Outside a batch (timers, active expiry, snapshots,
async commands, the binary lane) every call reads the clock.

A batch that touches no key with a TTL reads no clock at all. Compiled with mypyc
(``pion/_compiled.py``): the state lives in a native object, not module globals.
"""

from __future__ import annotations

import time
from typing import Final

_time: Final = time.time


class BatchClock:
    """The open batch's cached "now" (0 until its first read)."""

    def __init__(self) -> None:
        self.open = False
        self.cached_ms = 0

    def begin(self) -> None:
        """A batch starts: the next ``now_ms()`` reads the clock, later ones reuse it."""
        self.open = True
        self.cached_ms = 0

    def end(self) -> None:
        """The batch ended: every ``now_ms()`` reads the clock again."""
        self.open = False

    def now_ms(self) -> int:
        if not self.open:
            return int(_time() * 1000)
        if not self.cached_ms:
            self.cached_ms = int(_time() * 1000)
        return self.cached_ms


CLOCK: Final = BatchClock()


def now_ms() -> int:
    """Unix time in milliseconds (the open batch's cached value, if one is open)."""
    return CLOCK.now_ms()
