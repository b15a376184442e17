"""Numbered databases: SELECT FLUSHDB SWAPDB MOVE COPY (DBSIZE is the keyspace family's, per db).

``--databases N`` (16 by default, like Redis) keyspaces; a connection starts in database 0 and
``SELECT n`` switches it (redis-py's ``redis://host:port/1`` and LMCache's remote URL send it
on connect). Only the keyspace (strings and hashes) is per database: the V-store, KV.PREFIX,
SSM.PREFIX, semantic caches and FT.* indexes (which index database 0's hashes, as RediSearch
does) are the same whatever a connection selected. FLUSHALL empties every database. Texts are
Redis 7's.

Tenants (``server/tenants.py``): a tenant's prefix applies in every database; SELECT, MOVE and
COPY are open to it on its own keys, FLUSHDB and SWAPDB (everyone's keys) are the admin's. SELECT's
access row is ``commands/access.py``'s (it predates this family).
"""

from __future__ import annotations

from typing import Any

from pion.common.errors import CommandError
from pion.server.commands.keyspace import _keyspace, _make_room
from pion.server.commands.access import ADMIN, KEY0, Access
from pion.server.commands.spec import CommandSpec
from pion.server.context import CommandContext
from pion.server.commands.strings import strict_int
from pion.server.errors import NOT_AN_INTEGER, SYNTAX_ERROR
from pion.server.resp.replies import OK
from pion.server.store.keyspace import entry_bytes

OUT_OF_RANGE = "DB index is out of range"
SAME_OBJECT = "source and destination objects are the same"
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def _c_int(raw: bytes, not_an_int: str | None = None) -> int:
    """A database number as Redis reads it (string2ll, then a C int; Redis's two texts
    unless the command names its own)."""
    n = strict_int(raw)
    if n is None:
        raise CommandError(not_an_int or NOT_AN_INTEGER)
    if not I32_MIN <= n <= I32_MAX:
        raise CommandError(not_an_int or f"value is out of range, value must between {I32_MIN} and {I32_MAX}")
    return n


def _in_range(ctx: CommandContext, n: int) -> int:
    if not 0 <= n < len(ctx.server.stores.dbs):
        raise CommandError(OUT_OF_RANGE)
    return n


def _db_index(ctx: CommandContext, raw: bytes) -> int:
    """A database number checked against ``--databases``."""
    return _in_range(ctx, _c_int(raw))


def cmd_databases_select(ctx: CommandContext, args: list[bytes]) -> Any:
    ctx.client.db = _db_index(ctx, args[0])
    return OK


def cmd_databases_flushdb(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) > 1 or (args and args[0].upper() not in (b"ASYNC", b"SYNC")):
        raise CommandError(SYNTAX_ERROR)
    ks = _keyspace(ctx)
    ks.flush()
    return OK


def cmd_databases_swapdb(ctx: CommandContext, args: list[bytes]) -> Any:
    a = _c_int(args[0], "invalid first DB index")
    b = _c_int(args[1], "invalid second DB index")
    ctx.server.stores.swap_dbs(_in_range(ctx, a), _in_range(ctx, b))
    return OK


def cmd_databases_move(ctx: CommandContext, args: list[bytes]) -> Any:
    key = args[0]
    src_db = ctx.client.db
    dst_db = _db_index(ctx, args[1])
    if dst_db == src_db:
        raise CommandError(SAME_OBJECT)
    stores = ctx.server.stores
    src, dst = stores.dbs[src_db], stores.dbs[dst_db]
    if src.get(key) is None or dst.get(key) is not None:
        return 0
    stores.move_key(src_db, key, dst_db)
    return 1


def cmd_databases_copy(ctx: CommandContext, args: list[bytes]) -> Any:
    src_key, dst_key = args[0], args[1]
    src_db = dst_db = ctx.client.db
    replace = False
    i = 2
    while i < len(args):
        opt = args[i].upper()
        if opt == b"REPLACE":
            replace = True
        elif opt == b"DB" and i + 1 < len(args):
            dst_db = _db_index(ctx, args[i + 1])
            i += 1
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    if src_db == dst_db and src_key == dst_key:
        raise CommandError(SAME_OBJECT)
    stores = ctx.server.stores
    source, target = stores.dbs[src_db], stores.dbs[dst_db]
    value = source.get(src_key)
    if value is None:
        return 0
    existing = target.get(dst_key)
    if existing is not None and not replace:
        return 0
    grow = entry_bytes(dst_key, value) - (entry_bytes(dst_key, existing) if existing is not None else 0)
    _make_room(ctx, grow)
    if source.get(src_key) is None:  # evicted to make room for its own copy
        return 0
    stores.copy_key(src_db, src_key, dst_db, dst_key)
    return 1


COMMANDS: list[CommandSpec] = [
    CommandSpec("SELECT", 2, cmd_databases_select, frozenset({"fast"}),
                "Choose the numbered database the connection's keyspace commands use"),
    CommandSpec("FLUSHDB", -1, cmd_databases_flushdb, frozenset({"write"}),
                "Remove every key of the selected database",
                access=ADMIN),
    CommandSpec("SWAPDB", 3, cmd_databases_swapdb, frozenset({"write", "fast"}),
                "Exchange the contents of two databases",
                access=ADMIN),
    CommandSpec("MOVE", 3, cmd_databases_move, frozenset({"write", "fast"}),
                "Move a key to another database",
                access=KEY0),
    CommandSpec("COPY", -3, cmd_databases_copy, frozenset({"write"}),
                "Copy a key's value and TTL, optionally to another database",
                access=Access.keys(0, 1)),
]
