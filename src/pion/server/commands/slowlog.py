"""SLOWLOG GET [count] | LEN | RESET | HELP — Redis's slow-command log, read from memory.

The ring itself (``pion.server.slowlog.SlowLogRing``) is owned by the dispatcher, which
records into it; this family only reads and clears it. Replies are Redis's: GET is an
array of ``[id, unix time, duration µs, [args...], "ip:port", client name]``, newest first,
10 entries by default and all of them for ``-1``.
"""

from __future__ import annotations

from typing import Any

from pion.common.errors import CommandError, clip_for_echo
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import parse_redis_int
from pion.server.context import CommandContext, ServerState
from pion.server.resp.replies import OK, SimpleString
from pion.server.slowlog import SlowLogRing

DEFAULT_GET_COUNT = 10
_HELP = [
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Print this help.",
]


def ring_of(state: ServerState) -> SlowLogRing:
    """The dispatcher's ring (``ServerState.dispatcher``)."""
    return state.dispatcher.slowlog


def _count(arg: bytes) -> int:
    count = parse_redis_int(arg)
    if count < -1:
        raise CommandError("count should be greater than or equal to -1")
    return count


def cmd_slowlog_slowlog(ctx: CommandContext, args: list[bytes]) -> Any:
    sub = args[0].upper()
    n_args = len(args)
    if sub == b"GET" and n_args <= 2:
        count = _count(args[1]) if n_args == 2 else DEFAULT_GET_COUNT
        return [entry.reply() for entry in ring_of(ctx.server).get(count)]
    if sub == b"LEN" and n_args == 1:
        return len(ring_of(ctx.server))
    if sub == b"RESET" and n_args == 1:
        ring_of(ctx.server).reset()
        return OK
    if sub == b"HELP" and n_args == 1:
        return [SimpleString(line) for line in _HELP]
    if sub in (b"GET", b"LEN", b"RESET", b"HELP"):
        raise CommandError(f"wrong number of arguments for 'slowlog|{sub.decode().lower()}' command")
    raise CommandError(f"unknown subcommand '{clip_for_echo(args[0])}'. Try SLOWLOG HELP.")


COMMANDS: list[CommandSpec] = [
    CommandSpec("SLOWLOG", -2, cmd_slowlog_slowlog, frozenset({"admin"}),
                "Read or reset the slow-command log: GET [count], LEN, RESET, HELP"),
]
