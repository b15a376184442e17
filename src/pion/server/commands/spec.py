"""How a command family declares its commands (Redis's src/commands/*.json, as code).

Each family module exposes ``COMMANDS: list[CommandSpec]``; ``table.py`` joins
them and rejects duplicates. The dispatcher checks arity and auth before calling
the handler, so handlers only validate their own arguments.

Handler contract: ``handler(ctx, args)`` where ``args`` are the request's
arguments *after* the command name (``list[bytes]``). It returns a reply value
(see ``pion.server.resp.replies``) or raises ``CommandError``; a handler that
raises must not have changed any state. Handlers may be ``async def``.

Family module convention (``commands/table.py`` lists the modules explicitly):

  ``COMMANDS: list[CommandSpec]``   required; names are unique across all families.
  ``info(state) -> dict[str, list[tuple[str, object]]]``
                                    optional; INFO sections (name -> fields), merged
                                    into INFO in family order (e.g. ``"Pion"``).

Every command also says which of its arguments are keys, sessions or namespaces (``access``,
see ``commands/access.py``): the dispatcher checks a tenant's call against it before the
handler runs, and the table refuses to build without it.

Handlers reach the worker's parts through ``ctx.server`` (a typed ``ServerState``:
``stores``, ``receipt``, ``embedder``, ``persist``, ``table``, ``network``); start-up,
recovery and shutdown are ``pion.server.state``'s, not a family's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pion.server.commands.access import Access
    from pion.server.context import CommandContext

Handler = Callable[["CommandContext", list[bytes]], Any | Awaitable[Any]]

# Flags: "write" (changes state, logged to the WAL), "readonly", "noauth" (allowed
# before AUTH), "admin", "fast", "loading_ok".
@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One command: name (upper case, may contain '.'), Redis-style arity, flags, handler.

    ``arity`` counts the command name: N > 0 means exactly N words, -N means at least N.
    For container commands (CLIENT, KV.PREFIX is not one: its verbs are separate
    commands named e.g. "KV.PREFIX.LOOKUP") subcommands are parsed by the handler.
    """

    name: str
    arity: int
    handler: Handler
    flags: frozenset[str] = frozenset()
    summary: str = ""
    # Container commands whose verbs differ (AI.SEMANTIC_CACHE SET vs GET): the verbs, upper
    # case, that make a call a write — as if it had the "write" flag. Async handlers only.
    write_subcommands: frozenset[str] = frozenset()
    # Which arguments are keys/namespaces, for the tenant check (commands/access.py); None =
    # the row in access.ACCESS. The table refuses a command that has neither.
    access: Access | None = None
    # Set by workers/routing.py on a worker of -w N that forwards this command to worker 0: the
    # network layer then sends a client's consecutive pipelined forwarded commands as one batch.
    forwarded: bool = False
