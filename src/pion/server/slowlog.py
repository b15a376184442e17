"""Redis's SLOWLOG: an in-memory ring of the slowest recent commands, not log lines.

Why a ring and not the log: a semantic-cache lookup costs ~20 ms of model time on a CPU,
over the 10 ms default threshold, so logging each one fills the console of ``pion up``
with warnings nobody asked for. Redis keeps slow commands in memory and lets an operator
read them with ``SLOWLOG GET``; so do we.

An entry is what Redis records (``src/slowlog.c``): a growing id, the unix time the command
finished, its duration in microseconds, its arguments (at most 32; the 32nd becomes
``"... (N more arguments)"``; each cut to 128 bytes plus ``"... (N more bytes)"``), the
client's address and name. Passwords given to AUTH / HELLO ... AUTH are replaced by
``(redacted)``, as Redis does.

Start-up work is not a command: a handler that waited on one-time work (the embedding
model loading on first use) reports that time with ``exclude_from_slowlog`` and the
dispatcher leaves it out of the command's duration.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass

MAX_ARGS = 32  # SLOWLOG_ENTRY_MAX_ARGC
MAX_ARG_BYTES = 128  # SLOWLOG_ENTRY_MAX_STRING
DEFAULT_MAX_LEN = 128
REDACTED = b"(redacted)"

# Seconds of one-time work (model load) the running command waited on; per asyncio task.
_untimed_s: ContextVar[float] = ContextVar("pion_slowlog_untimed_s", default=0.0)


def exclude_from_slowlog(seconds: float) -> None:
    """Called by a handler: ``seconds`` of its wait were start-up work, not the command."""
    if seconds > 0.0:
        _untimed_s.set(_untimed_s.get() + seconds)


def take_untimed_s() -> float:
    """The excluded seconds reported since the last call in this task; resets them."""
    seconds = _untimed_s.get()
    if seconds:
        _untimed_s.set(0.0)
    return seconds


@dataclass(frozen=True, slots=True)
class SlowLogEntry:
    """One recorded command, in the order of Redis's reply fields."""

    entry_id: int
    unix_time: int
    duration_us: int
    args: tuple[bytes, ...]
    client_addr: str
    client_name: str

    def reply(self) -> list[object]:
        """Redis's six-element array: id, time, duration µs, args, addr, name."""
        return [self.entry_id, self.unix_time, self.duration_us, list(self.args),
                self.client_addr.encode(), self.client_name.encode()]


def _shown_args(request: Sequence[bytes]) -> tuple[bytes, ...]:
    """The arguments as Redis keeps them: bounded count and size, passwords redacted."""
    n = len(request)
    keep = n if n <= MAX_ARGS else MAX_ARGS - 1
    shown: list[bytes] = []
    for arg in request[:keep]:
        if len(arg) > MAX_ARG_BYTES:
            arg = arg[:MAX_ARG_BYTES] + b"... (%d more bytes)" % (len(arg) - MAX_ARG_BYTES)
        shown.append(arg)
    if keep < n:
        shown.append(b"... (%d more arguments)" % (n - keep))
    _redact(shown)
    return tuple(shown)


def _redact(args: list[bytes]) -> None:
    """AUTH [user] pass, HELLO ... AUTH user pass: never keep a password in memory."""
    name = args[0].upper() if args else b""
    if name == b"AUTH":
        for i in range(1, len(args)):
            args[i] = REDACTED
    elif name == b"HELLO":
        for i, arg in enumerate(args):
            if arg.upper() == b"AUTH":
                for j in range(i + 1, min(i + 3, len(args))):
                    args[j] = REDACTED


class SlowLogRing:
    """The newest ``max_len`` slow commands, newest first when read.

    Recording happens on the event loop thread only (the dispatcher), so no lock.
    """

    def __init__(self, slower_than_us: int, max_len: int = DEFAULT_MAX_LEN) -> None:
        self.slower_than_us = slower_than_us  # -1 (any negative) disables, 0 records every command
        self.max_len = max_len
        self._entries: deque[SlowLogEntry] = deque(maxlen=max_len if max_len > 0 else 0)
        self._next_id = 0

    def record(self, request: Sequence[bytes], duration_s: float, client_addr: str, client_name: str) -> bool:
        """Keep the command if it took at least the threshold; True when kept."""
        if self.slower_than_us < 0 or self.max_len <= 0:
            return False
        duration_us = int(duration_s * 1e6)
        if duration_us < self.slower_than_us:
            return False
        self._entries.appendleft(SlowLogEntry(self._next_id, int(time.time()), duration_us,
                                              _shown_args(request), client_addr, client_name))
        self._next_id += 1
        return True

    def get(self, count: int = 10) -> list[SlowLogEntry]:
        """The newest ``count`` entries (all of them for -1), newest first."""
        entries = list(self._entries)
        return entries if count < 0 else entries[:count]

    def __len__(self) -> int:
        return len(self._entries)

    def reset(self) -> None:
        """Drop every entry; ids keep growing, as in Redis."""
        self._entries.clear()
