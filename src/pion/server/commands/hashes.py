"""Hash commands: HSET HMSET HSETNX HGET HMGET HGETALL HDEL HLEN HEXISTS HKEYS HVALS HSTRLEN
HINCRBY, and TYPE.

Hashes live in the same keyspace as strings (``Keyspace`` holds ``dict[bytes, bytes]``
values beside ``bytes``), so DEL, EXISTS, EXPIRE, TTL, KEYS, SCAN, DBSIZE, expiry and
persistence treat them like any key. A hash command on a string key (and GET on a hash)
answers Redis's ``-WRONGTYPE``; SET replaces a hash like Redis does. They are the
documents of the FT.* indexes (``pion.server.commands.search``), which follow every
change through ``Keyspace.watchers``.
"""

from __future__ import annotations

from typing import Any

from pion.common.errors import CommandError, arity_error
from pion.server.commands.keyspace import _make_room, wrongtype
from pion.server.commands.store_args import parse_redis_int
from pion.server.commands.spec import CommandSpec
from pion.server.context import CommandContext
from pion.server.resp.replies import OK, SimpleString
from pion.server.store.keyspace import (
    ENTRY_OVERHEAD_BYTES,
    FIELD_OVERHEAD_BYTES,
    Hash,
    Keyspace,
    WrongTypeError,
)


def _keyspace(ctx: CommandContext) -> Keyspace:
    return ctx.server.stores.dbs[ctx.client.db]  # the SELECTed database


def _hash(ctx: CommandContext, key: bytes) -> Hash | None:
    try:
        return _keyspace(ctx).get_hash(key)
    except WrongTypeError:
        raise wrongtype() from None


def _growth(current: Hash | None, key: bytes, pairs: list[bytes]) -> int:
    """Bytes an HSET adds (for --maxmemory), counted like ``Keyspace.used_bytes``."""
    extra = len(key) + ENTRY_OVERHEAD_BYTES if current is None else 0
    for i in range(0, len(pairs), 2):
        old = None if current is None else current.get(pairs[i])
        if old is None:
            extra += len(pairs[i]) + len(pairs[i + 1]) + FIELD_OVERHEAD_BYTES
        else:
            extra += len(pairs[i + 1]) - len(old)
    return extra


def _write(ctx: CommandContext, key: bytes, pairs: list[bytes]) -> int:
    current = _hash(ctx, key)
    _make_room(ctx, _growth(current, key, pairs))
    return _keyspace(ctx).hset(key, pairs)


def cmd_hashes_hset(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) % 2 == 0:
        raise arity_error("hset")
    return _write(ctx, args[0], args[1:])


def cmd_hashes_hmset(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) % 2 == 0:
        raise arity_error("hmset")
    _write(ctx, args[0], args[1:])
    return OK


def cmd_hashes_hsetnx(ctx: CommandContext, args: list[bytes]) -> Any:
    current = _hash(ctx, args[0])
    if current is not None and args[1] in current:
        return 0
    return _write(ctx, args[0], args[1:3])


def cmd_hashes_hget(ctx: CommandContext, args: list[bytes]) -> Any:
    current = _hash(ctx, args[0])
    return None if current is None else current.get(args[1])


def cmd_hashes_hmget(ctx: CommandContext, args: list[bytes]) -> Any:
    current = _hash(ctx, args[0]) or {}
    return [current.get(f) for f in args[1:]]


def cmd_hashes_hgetall(ctx: CommandContext, args: list[bytes]) -> Any:
    return dict(_hash(ctx, args[0]) or {})


def cmd_hashes_hdel(ctx: CommandContext, args: list[bytes]) -> Any:
    _hash(ctx, args[0])  # WRONGTYPE before anything else
    return _keyspace(ctx).hdel(args[0], args[1:])


def cmd_hashes_hlen(ctx: CommandContext, args: list[bytes]) -> Any:
    return len(_hash(ctx, args[0]) or {})


def cmd_hashes_hexists(ctx: CommandContext, args: list[bytes]) -> Any:
    return int(args[1] in (_hash(ctx, args[0]) or {}))


def cmd_hashes_hkeys(ctx: CommandContext, args: list[bytes]) -> Any:
    return list(_hash(ctx, args[0]) or {})


def cmd_hashes_hvals(ctx: CommandContext, args: list[bytes]) -> Any:
    return list((_hash(ctx, args[0]) or {}).values())


def cmd_hashes_hstrlen(ctx: CommandContext, args: list[bytes]) -> Any:
    return len((_hash(ctx, args[0]) or {}).get(args[1], b""))


def cmd_hashes_hincrby(ctx: CommandContext, args: list[bytes]) -> Any:
    key, field = args[0], args[1]
    increment = parse_redis_int(args[2])
    current = _hash(ctx, key) or {}
    raw = current.get(field, b"0")
    try:
        value = parse_redis_int(raw)
    except CommandError:
        raise CommandError("hash value is not an integer") from None
    result = value + increment
    if not -(2**63) <= result < 2**63:
        raise CommandError("increment or decrement would overflow")
    _write(ctx, key, [field, str(result).encode()])
    return result


def cmd_hashes_type(ctx: CommandContext, args: list[bytes]) -> Any:
    return SimpleString(_keyspace(ctx).type_of(args[0]))


_W = frozenset({"write", "fast"})
_R = frozenset({"readonly", "fast"})
COMMANDS: list[CommandSpec] = [
    CommandSpec("HSET", -4, cmd_hashes_hset, _W, "Set fields of a hash"),
    CommandSpec("HMSET", -4, cmd_hashes_hmset, _W, "Set fields of a hash (deprecated form, replies OK)"),
    CommandSpec("HSETNX", 4, cmd_hashes_hsetnx, _W, "Set a hash field only if it does not exist"),
    CommandSpec("HGET", 3, cmd_hashes_hget, _R, "Get one field of a hash"),
    CommandSpec("HMGET", -3, cmd_hashes_hmget, _R, "Get several fields of a hash"),
    CommandSpec("HGETALL", 2, cmd_hashes_hgetall, frozenset({"readonly"}), "Every field and value of a hash"),
    CommandSpec("HDEL", -3, cmd_hashes_hdel, _W, "Delete fields of a hash"),
    CommandSpec("HLEN", 2, cmd_hashes_hlen, _R, "Number of fields in a hash"),
    CommandSpec("HEXISTS", 3, cmd_hashes_hexists, _R, "Whether a hash field exists"),
    CommandSpec("HKEYS", 2, cmd_hashes_hkeys, frozenset({"readonly"}), "The field names of a hash"),
    CommandSpec("HVALS", 2, cmd_hashes_hvals, frozenset({"readonly"}), "The values of a hash"),
    CommandSpec("HSTRLEN", 3, cmd_hashes_hstrlen, _R, "Length of a hash field's value"),
    CommandSpec("HINCRBY", 4, cmd_hashes_hincrby, _W, "Add an integer to a hash field"),
    CommandSpec("TYPE", 2, cmd_hashes_type, _R, "The kind of value a key holds"),
]
