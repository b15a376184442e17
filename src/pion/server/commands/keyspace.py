"""Keyspace commands: SET GET MGET MSET EXISTS DEL UNLINK EXPIRE PEXPIRE TTL PTTL KEYS SCAN DBSIZE.

Thin wrappers over ``pion.server.store.keyspace.Keyspace`` (the client's SELECTed database,
``state.stores.dbs[client.db]``);
argument errors use Redis's wording so redis-py raises the same exceptions it would
against Redis. Writes that grow the keyspace ask the V-store, which shares the
``--maxmemory`` budget, to make room first (evicting LRU sessions); ``-OOM`` if it cannot.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pion.common.errors import CommandError, arity_error
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import parse_redis_int as parse_int
from pion.server.errors import SYNTAX_ERROR
from pion.server.context import CommandContext, ServerState
from pion.server.resp.replies import OK
from pion.server.store.glob import compile_glob
from pion.server.store.keyspace import ENTRY_OVERHEAD_BYTES, Keyspace, now_ms, value_bytes
from pion.server.tenants import visible

KEYS_SLICE = 20_000  # keys matched between two yields to the event loop
MAX_EXPIRE_MS = 2**62  # beyond this, unix-ms arithmetic overflows Redis's 64-bit range
MAX_SCAN_COUNT = 1_000_000
WRONGTYPE_MESSAGE = "Operation against a key holding the wrong kind of value"


def wrongtype() -> CommandError:
    """Redis's -WRONGTYPE (redis-py raises ResponseError with this text)."""
    return CommandError(WRONGTYPE_MESSAGE, code="WRONGTYPE")


def _keyspace(ctx: CommandContext) -> Keyspace:
    return ctx.server.stores.dbs[ctx.client.db]  # the SELECTed database


def _deadline_ms(amount: int, unit_ms: int, absolute: bool, command: str) -> int:
    """Absolute unix-ms deadline for EX/PX/EXAT/PXAT ``amount``; Redis's range errors."""
    if amount <= 0 and command == "set":
        raise CommandError(f"invalid expire time in '{command}' command")
    if abs(amount) > MAX_EXPIRE_MS // unit_ms:
        raise CommandError(f"invalid expire time in '{command}' command")
    deadline = amount * unit_ms if absolute else now_ms() + amount * unit_ms
    if deadline > MAX_EXPIRE_MS:
        raise CommandError(f"invalid expire time in '{command}' command")
    return deadline


def _make_room(ctx: CommandContext, extra_bytes: int) -> None:
    """Under --maxmemory, evict keys (--maxmemory-policy) then V-store sessions so
    ``extra_bytes`` fit; else -OOM. The budget is read from the V-store: CONFIG SET changes it."""
    if extra_bytes <= 0 or ctx.server.stores.vstore.max_bytes <= 0:
        return
    ctx.server.stores.make_room(extra_bytes)


def _growth(ks: Keyspace, key: bytes, value: bytes) -> int:
    old = ks.get(key)
    if old is None:
        return len(key) + len(value) + ENTRY_OVERHEAD_BYTES
    return len(value) - value_bytes(old)


# ---- strings -------------------------------------------------------------------------------
def cmd_keyspace_get(ctx: CommandContext, args: list[bytes]) -> Any:
    value = ctx.server.stores.dbs[ctx.client.db].get(args[0])
    if type(value) is dict:
        raise wrongtype()
    return value


def cmd_keyspace_set(ctx: CommandContext, args: list[bytes]) -> Any:
    stores = ctx.server.stores
    ks = stores.dbs[ctx.client.db]
    key, value = args[0], args[1]
    if len(args) == 2:  # the hot path: plain SET
        if stores.vstore.max_bytes:
            _make_room(ctx, _growth(ks, key, value))
        ks.set(key, value)
        return OK
    condition = b""
    want_old = False
    keep_ttl = False
    expiry: tuple[bytes, int] | None = None
    i = 2
    while i < len(args):
        opt = args[i].upper()
        if opt in (b"NX", b"XX"):
            if condition and condition != opt:
                raise CommandError(SYNTAX_ERROR)
            condition = opt
        elif opt == b"GET":
            want_old = True
        elif opt == b"KEEPTTL":
            if expiry is not None:
                raise CommandError(SYNTAX_ERROR)
            keep_ttl = True
        elif opt in (b"EX", b"PX", b"EXAT", b"PXAT"):
            if expiry is not None or keep_ttl or i + 1 >= len(args):
                raise CommandError(SYNTAX_ERROR)
            expiry = (opt, parse_int(args[i + 1]))
            i += 1
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    deadline = None
    if expiry is not None:
        unit = 1000 if expiry[0] in (b"EX", b"EXAT") else 1
        deadline = _deadline_ms(expiry[1], unit, expiry[0] in (b"EXAT", b"PXAT"), "set")
    old = ks.get(key)
    if want_old and type(old) is dict:
        raise wrongtype()
    if (condition == b"NX" and old is not None) or (condition == b"XX" and old is None):
        return old if want_old else None
    _make_room(ctx, _growth(ks, key, value))
    ks.set(key, value, expire_at_ms=deadline, keep_ttl=keep_ttl)
    return old if want_old else OK


def cmd_keyspace_mget(ctx: CommandContext, args: list[bytes]) -> Any:
    # ``ks.get`` called on the object, not through a bound method in a local: compiled, that
    # is a native call per key instead of a Python-level one (issue 13).
    ks = _keyspace(ctx)
    values: list[Any] = []
    for key in args:
        value = ks.get(key)
        values.append(value if type(value) is not dict else None)
    return values


def cmd_keyspace_mset(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) % 2:
        raise arity_error("mset")
    ks = _keyspace(ctx)
    pairs = dict(zip(args[0::2], args[1::2], strict=True))
    _make_room(ctx, sum(_growth(ks, k, v) for k, v in pairs.items()))
    for key, value in pairs.items():
        ks.set(key, value)
    return OK


def cmd_keyspace_exists(ctx: CommandContext, args: list[bytes]) -> Any:
    get = _keyspace(ctx).get
    return sum(1 for k in args if get(k) is not None)


def cmd_keyspace_del(ctx: CommandContext, args: list[bytes]) -> Any:
    return _keyspace(ctx).delete(args)


# ---- expiry ---------------------------------------------------------------------------------
def _expire_flags(args: list[bytes]) -> frozenset[bytes]:
    """Redis's rules: NX excludes the others, GT excludes LT; XX combines with GT or LT."""
    flags: set[bytes] = set()
    for raw in args:
        opt = raw.upper()
        if opt not in (b"NX", b"XX", b"GT", b"LT"):
            raise CommandError(f"Unsupported option {raw.decode('utf-8', 'replace')[:128]}")
        flags.add(opt)
    if b"NX" in flags and len(flags) > 1:
        raise CommandError("NX and XX, GT or LT options at the same time are not compatible")
    if b"GT" in flags and b"LT" in flags:
        raise CommandError("GT and LT options at the same time are not compatible")
    return frozenset(flags)


def _expire(ctx: CommandContext, args: list[bytes], unit_ms: int, command: str) -> Any:
    amount = parse_int(args[1])
    flags = _expire_flags(args[2:])
    if abs(amount) > MAX_EXPIRE_MS // unit_ms:
        raise CommandError(f"invalid expire time in '{command}' command")
    deadline = now_ms() + amount * unit_ms
    ks = _keyspace(ctx)
    if ks.get(args[0]) is None:
        return 0
    current = ks.expire_at_ms(args[0])  # None: no TTL, an infinite one for GT and LT
    if b"NX" in flags and current is not None or b"XX" in flags and current is None:
        return 0
    if b"GT" in flags and (current is None or deadline <= current):
        return 0
    if b"LT" in flags and current is not None and deadline >= current:
        return 0
    return int(ks.expire(args[0], deadline))


def cmd_keyspace_expire(ctx: CommandContext, args: list[bytes]) -> Any:
    return _expire(ctx, args, 1000, "expire")


def cmd_keyspace_pexpire(ctx: CommandContext, args: list[bytes]) -> Any:
    return _expire(ctx, args, 1, "pexpire")


def cmd_keyspace_ttl(ctx: CommandContext, args: list[bytes]) -> Any:
    ms = _keyspace(ctx).ttl_ms(args[0])
    return ms if ms < 0 else (ms + 500) // 1000


def cmd_keyspace_pttl(ctx: CommandContext, args: list[bytes]) -> Any:
    return _keyspace(ctx).ttl_ms(args[0])


# ---- iteration ------------------------------------------------------------------------------
async def cmd_keyspace_keys(ctx: CommandContext, args: list[bytes]) -> Any:
    """KEYS: a big keyspace is matched in slices with a yield between them, so other
    clients are served meanwhile (Redis blocks; we answer with the keys that matched and
    are still live when the last slice is done)."""
    ks = _keyspace(ctx)
    tenant = ctx.client.tenant  # a tenant sees only its own keys (server/tenants.py)
    if len(ks) <= KEYS_SLICE:
        keys = ks.keys(args[0])
        return keys if tenant is None else [k for k in keys if tenant.owns(k)]
    names = ks.key_names()
    matcher = compile_glob(args[0]) if args[0] != b"*" else None
    found: list[bytes] = []
    for start in range(0, len(names), KEYS_SLICE):
        batch = names[start:start + KEYS_SLICE]
        found.extend(batch if matcher is None else [k for k in batch if matcher.match(k)])
        await asyncio.sleep(0)
    live: list[bytes] = []
    for start in range(0, len(found), KEYS_SLICE):
        live.extend(k for k in found[start:start + KEYS_SLICE]
                    if ks.get(k) is not None and (tenant is None or tenant.owns(k)))
        await asyncio.sleep(0)
    return live


def cmd_keyspace_scan(ctx: CommandContext, args: list[bytes]) -> Any:
    raw_cursor = args[0]
    if not raw_cursor.isdigit() or len(raw_cursor) > 20 or int(raw_cursor) >= 2**64:
        raise CommandError("invalid cursor")
    cursor = int(raw_cursor)
    count = 10
    pattern: bytes | None = None
    wanted_type: str | None = None
    i = 1
    while i < len(args):
        opt = args[i].upper()
        if i + 1 >= len(args):
            raise CommandError(SYNTAX_ERROR)
        if opt == b"COUNT":
            count = parse_int(args[i + 1])
            if count < 1:
                raise CommandError(SYNTAX_ERROR)
            count = min(count, MAX_SCAN_COUNT)
        elif opt == b"MATCH":
            pattern = args[i + 1]
        elif opt == b"TYPE":
            wanted_type = args[i + 1].lower().decode("utf-8", "replace")
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 2
    ks = _keyspace(ctx)
    next_cursor, keys = ks.scan(cursor, count, pattern)
    if wanted_type is not None:
        keys = [k for k in keys if ks.type_of(k) == wanted_type]
    if ctx.client.tenant is not None:  # a batch may come back empty: the cursor still moves on
        keys = [k for k in keys if visible(ctx, k)]
    return [str(next_cursor).encode(), keys]


def cmd_keyspace_dbsize(ctx: CommandContext, args: list[bytes]) -> Any:
    tenant = ctx.client.tenant
    if tenant is not None:  # the tenant's own keys (a walk: tenants' DBSIZE is O(keys))
        return sum(1 for k in _keyspace(ctx).key_names() if tenant.owns(k))
    return len(_keyspace(ctx))


# ---- INFO ------------------------------------------------------------------------------------
def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    dbs = state.stores.dbs
    fields: list[tuple[str, object]] = [
        (f"db{ks.db}", f"keys={len(ks)},expires={ks.n_expires},avg_ttl=0") for ks in dbs if len(ks)]
    return {"Memory": [("keyspace_bytes", sum(ks.used_bytes for ks in dbs))],
            "Stats": [("expired_keys", sum(ks.expired_keys for ks in dbs)),
                      ("evicted_keys", state.stores.evictor.evicted_keys)],
            "Keyspace": fields}


COMMANDS: list[CommandSpec] = [
    CommandSpec("GET", 2, cmd_keyspace_get, frozenset({"readonly", "fast"}),
                "Get the value of a key"),
    CommandSpec("SET", -3, cmd_keyspace_set, frozenset({"write"}),
                "Set a key's value, with optional expiry and conditions"),
    CommandSpec("MGET", -2, cmd_keyspace_mget, frozenset({"readonly", "fast"}),
                "Get the values of several keys"),
    CommandSpec("MSET", -3, cmd_keyspace_mset, frozenset({"write"}), "Set several keys"),
    CommandSpec("EXISTS", -2, cmd_keyspace_exists, frozenset({"readonly", "fast"}),
                "Count how many of the given keys exist"),
    CommandSpec("DEL", -2, cmd_keyspace_del, frozenset({"write"}), "Delete keys"),
    CommandSpec("UNLINK", -2, cmd_keyspace_del, frozenset({"write"}), "Delete keys"),
    CommandSpec("EXPIRE", -3, cmd_keyspace_expire, frozenset({"write", "fast"}),
                "Set a key's time to live in seconds"),
    CommandSpec("PEXPIRE", -3, cmd_keyspace_pexpire, frozenset({"write", "fast"}),
                "Set a key's time to live in milliseconds"),
    CommandSpec("TTL", 2, cmd_keyspace_ttl, frozenset({"readonly", "fast"}),
                "Seconds a key has left to live"),
    CommandSpec("PTTL", 2, cmd_keyspace_pttl, frozenset({"readonly", "fast"}),
                "Milliseconds a key has left to live"),
    CommandSpec("KEYS", 2, cmd_keyspace_keys, frozenset({"readonly"}),
                "All keys matching a glob pattern"),
    CommandSpec("SCAN", -2, cmd_keyspace_scan, frozenset({"readonly"}),
                "Iterate the keyspace incrementally"),
    CommandSpec("DBSIZE", 1, cmd_keyspace_dbsize, frozenset({"readonly", "fast"}),
                "Number of keys in the keyspace"),
]
