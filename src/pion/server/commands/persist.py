"""Persistence commands: snapshots on demand.

  KV.PREFIX.SAVE [path]  -> +OK   snapshot to pion.vstore.<worker> (or a relative path inside --dir)
  SAVE                   -> +OK   the same, default path (Redis's name)
  BGSAVE [SCHEDULE]      -> +Background saving started   (snapshot without blocking other clients)
  LASTSAVE               -> :<unix time of the last successful snapshot>

Recovery and the WAL's wiring (journals, the per-batch ``before_reply`` write and fsync)
are start-up's, in ``pion.server.state.open_state``; this family only names the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pion.common.errors import CommandError, clip_for_echo
from pion.server.commands.spec import CommandSpec
from pion.server.resp.replies import OK, SimpleString

if TYPE_CHECKING:
    from pion.server.context import CommandContext, ServerState


def cmd_persist_kvprefix_save(ctx: CommandContext, args: list[bytes]) -> object:
    if len(args) > 1:
        raise CommandError("syntax error: KV.PREFIX.SAVE takes at most one path")
    path = None
    if args:
        try:
            path = args[0].decode()
        except UnicodeDecodeError:
            raise CommandError(f"snapshot path is not valid UTF-8: '{clip_for_echo(args[0])}'") from None
        if "\x00" in path:  # the OS refuses it; say so instead of failing inside pathlib
            raise CommandError(f"snapshot path contains a NUL byte: '{clip_for_echo(args[0])}'")
    ctx.server.persist.save(path)
    return OK


def cmd_persist_save(ctx: CommandContext, args: list[bytes]) -> object:
    ctx.server.persist.save()
    return OK


def cmd_persist_bgsave(ctx: CommandContext, args: list[bytes]) -> object:
    # redis-py's bgsave() sends SCHEDULE: accepted, but a save already running is still
    # refused (nothing is queued behind it in this build).
    if len(args) > 1 or (args and args[0].upper() != b"SCHEDULE"):
        raise CommandError("syntax error: BGSAVE takes no arguments (or SCHEDULE) in this build")
    ctx.server.persist.start_bgsave()
    return SimpleString("Background saving started")


def cmd_persist_lastsave(ctx: CommandContext, args: list[bytes]) -> object:
    return ctx.server.persist.last_save_unix


def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    return {"Persistence": [("loading", 0), *state.persist.info().items()]}


_ADMIN = frozenset({"admin"})
COMMANDS: list[CommandSpec] = [
    CommandSpec("KV.PREFIX.SAVE", -1, cmd_persist_kvprefix_save, _ADMIN,
                "snapshot the V-store and keyspace, then truncate the WAL"),
    CommandSpec("SAVE", 1, cmd_persist_save, _ADMIN, "Synchronously save the dataset to disk"),
    CommandSpec("BGSAVE", -1, cmd_persist_bgsave, _ADMIN, "Asynchronously save the dataset to disk"),
    CommandSpec("LASTSAVE", 1, cmd_persist_lastsave, frozenset({"fast"}),
                "Unix time of the last successful save"),
]
