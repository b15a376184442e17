"""ACL: the Redis ACL subcommands that describe Pion's users (server/tenants.py).

  ACL WHOAMI  -> bulk: the user this connection is authenticated as (``default`` = the admin,
                 or the default user confined by --ns-prefix; else the tenant's name)
  ACL USERS   -> array: ``default`` then every tenant's name (admin only)
  ACL HELP    -> array of lines

Users are declared at start-up (``--requirepass``, ``--tenant``); ACL SETUSER and friends are
not offered, so they answer Redis's unknown-subcommand error.
"""

from __future__ import annotations

from typing import Any

from pion.common.errors import CommandError, arity_error, clip_for_echo
from pion.server.commands.access import Access
from pion.server.commands.spec import CommandSpec
from pion.server.context import CommandContext
from pion.server.resp.replies import SimpleString
from pion.server.tenants import DEFAULT_USER

_HELP = ("ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
         "WHOAMI", "    Return the current connection username.",
         "USERS", "    List all the registered usernames.",
         "HELP", "    Print this help.")


def cmd_acl_acl(ctx: CommandContext, args: list[bytes]) -> Any:
    sub = args[0].upper()
    rest = args[1:]
    if sub in (b"WHOAMI", b"USERS") and rest:
        raise arity_error(f"acl|{sub.decode().lower()}")
    if sub == b"WHOAMI":
        tenant = ctx.client.tenant
        return (DEFAULT_USER if tenant is None else tenant.name).encode()
    if sub == b"USERS":
        tenants = ctx.server.tenants
        return [DEFAULT_USER.encode(), *(name.encode() for name in (tenants.by_name if tenants else {}))]
    if sub == b"HELP":
        return [SimpleString(line) for line in _HELP]
    raise CommandError(f"unknown subcommand '{clip_for_echo(args[0])}'. Try ACL HELP.")


COMMANDS: list[CommandSpec] = [
    CommandSpec("ACL", -2, cmd_acl_acl, frozenset({"fast"}),
                "Users: WHOAMI, USERS, HELP",
                access=Access("none", tenant_verbs=frozenset({b"WHOAMI", b"HELP"}))),
]
