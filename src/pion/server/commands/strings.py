"""String commands beyond SET/GET: GETEX GETDEL SETEX PSETEX SETNX MSETNX RENAME RENAMENX GETRANGE
SETRANGE APPEND STRLEN INCR DECR INCRBY DECRBY INCRBYFLOAT SETBIT GETBIT BITCOUNT LCS.

Redis 7's semantics and error texts (``tests/server/test_strings_*.py`` run every case against
Debian's redis-server too and compare the replies). Each works on the client's SELECTed database.
Logging reuses the keyspace's records: a command that changes a value (APPEND, SETRANGE, INCR...,
SETBIT) is logged as the SET of the value it produced, its TTL kept — what Redis propagates for
INCRBYFLOAT, and replay needs no arithmetic; GETDEL logs a DEL, GETEX an EXPIRE, RENAME its own
record. A write that grows the keyspace makes room under ``--maxmemory`` first, like SET.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from pion.common.errors import CommandError, arity_error
from pion.server.commands.keyspace import (MAX_EXPIRE_MS, _deadline_ms, _growth, _keyspace, _make_room,
                                           wrongtype)
from pion.server.commands.access import KEY0, Access
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import parse_redis_int
from pion.server.context import CommandContext
from pion.server.errors import NOT_A_FLOAT, NOT_AN_INTEGER, SYNTAX_ERROR
from pion.server.resp.replies import OK
from pion.server.store.keyspace import Keyspace, now_ms

MAX_BIT_OFFSET = 2**32 - 1  # Redis: bit offsets address at most 512 MB
MAX_LCS_CELLS = 16 * 1024**2  # the LCS table is filled in Python: keep one call under ~10 s
STRING_TOO_BIG = "string exceeds maximum allowed size (proto-max-bulk-len)"
OVERFLOW = "increment or decrement would overflow"
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
# Redis's string2ll: an optional '-', then 0 alone or a digit 1-9 followed by digits (no '+',
# spaces or leading zeros) — what INCR accepts as the stored value and as the increment.
_STRICT_INT = re.compile(rb"0|-?[1-9][0-9]*")
# Redis's string2ld (strtold): no leading space, a decimal or hex float, no trailing garbage.
_FLOAT_TEXT = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INFINITY = re.compile(rb"[+-]?(?:inf|infinity)", re.IGNORECASE)
_NONZERO_DIGIT = re.compile(rb"[1-9]")


def _string(ks: Keyspace, key: bytes) -> bytes | None:
    value = ks.get(key)
    if value is not None and type(value) is not bytes:
        raise wrongtype()
    return value


def strict_int(raw: bytes) -> int | None:
    """The integer ``raw`` spells exactly as Redis's string2ll reads it, else None."""
    if len(raw) > 20 or _STRICT_INT.fullmatch(raw) is None:
        return None
    value = int(raw)
    return value if I64_MIN <= value <= I64_MAX else None


def _int_arg(raw: bytes) -> int:
    value = strict_int(raw)
    if value is None:
        raise CommandError(NOT_AN_INTEGER)
    return value


def _store(ctx: CommandContext, ks: Keyspace, key: bytes, value: bytes) -> None:
    """Write a computed value, keeping the key's TTL (the record is a SET of the result)."""
    _make_room(ctx, _growth(ks, key, value))
    ks.set(key, value, keep_ttl=True)


# ---- get and delete / expire --------------------------------------------------------------------
def cmd_strings_getdel(ctx: CommandContext, args: list[bytes]) -> Any:
    ks = _keyspace(ctx)
    value = _string(ks, args[0])
    if value is not None:
        ks.delete([args[0]])
    return value


def cmd_strings_getex(ctx: CommandContext, args: list[bytes]) -> Any:
    """Redis's order: options' syntax, then the key (a missing one is nil whatever the
    expiry), then its type, then the expiry's value."""
    key = args[0]
    expiry: tuple[bytes, bytes] | None = None
    persist = False
    i = 1
    while i < len(args):
        opt = args[i].upper()
        if opt == b"PERSIST" and expiry is None and not persist:
            persist = True
            i += 1
        elif opt in (b"EX", b"PX", b"EXAT", b"PXAT") and expiry is None and not persist \
                and i + 1 < len(args):
            expiry = (opt, args[i + 1])
            i += 2
        else:
            raise CommandError(SYNTAX_ERROR)
    ks = _keyspace(ctx)
    value = _string(ks, key)
    if value is None:
        return None
    deadline: int | None = None
    if expiry is not None:
        amount = parse_redis_int(expiry[1])
        unit = 1000 if expiry[0] in (b"EX", b"EXAT") else 1
        if amount <= 0:
            raise CommandError("invalid expire time in 'getex' command")
        deadline = _deadline_ms(amount, unit, expiry[0] in (b"EXAT", b"PXAT"), "getex")
    if deadline is not None:
        if deadline <= now_ms():
            ks.delete([key])
        else:
            ks.expire(key, deadline)
    elif persist and ks.expire_at_ms(key) is not None:
        ks.expire(key, None)
    return value


# ---- set variants -------------------------------------------------------------------------------
def _setex(ctx: CommandContext, args: list[bytes], unit_ms: int, name: str) -> Any:
    amount = parse_redis_int(args[1])
    if amount <= 0 or amount > MAX_EXPIRE_MS // unit_ms:
        raise CommandError(f"invalid expire time in '{name}' command")
    deadline = _deadline_ms(amount, unit_ms, False, name)
    ks = _keyspace(ctx)
    _make_room(ctx, _growth(ks, args[0], args[2]))
    ks.set(args[0], args[2], expire_at_ms=deadline)
    return OK


def cmd_strings_setex(ctx: CommandContext, args: list[bytes]) -> Any:
    return _setex(ctx, args, 1000, "setex")


def cmd_strings_psetex(ctx: CommandContext, args: list[bytes]) -> Any:
    return _setex(ctx, args, 1, "psetex")


def cmd_strings_setnx(ctx: CommandContext, args: list[bytes]) -> Any:
    ks = _keyspace(ctx)
    if ks.get(args[0]) is not None:
        return 0
    _make_room(ctx, _growth(ks, args[0], args[1]))
    ks.set(args[0], args[1])
    return 1


def cmd_strings_msetnx(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) % 2:
        raise arity_error("msetnx")
    ks = _keyspace(ctx)
    pairs = dict(zip(args[0::2], args[1::2], strict=True))
    if any(ks.get(k) is not None for k in pairs):
        return 0
    _make_room(ctx, sum(_growth(ks, k, v) for k, v in pairs.items()))
    for key, value in pairs.items():
        ks.set(key, value)
    return 1


# ---- rename -------------------------------------------------------------------------------------
def _rename(ctx: CommandContext, args: list[bytes], nx: bool) -> Any:
    ks = _keyspace(ctx)
    src, dst = args
    if ks.get(src) is None:
        raise CommandError("no such key")
    if src == dst:
        return 0 if nx else OK
    if nx and ks.get(dst) is not None:
        return 0
    ks.get(dst)  # an expired destination is removed first (not logged), like any lookup
    ks.rename(src, dst)
    return 1 if nx else OK


def cmd_strings_rename(ctx: CommandContext, args: list[bytes]) -> Any:
    return _rename(ctx, args, nx=False)


def cmd_strings_renamenx(ctx: CommandContext, args: list[bytes]) -> Any:
    return _rename(ctx, args, nx=True)


# ---- ranges -------------------------------------------------------------------------------------
def _clamp_range(start: int, end: int, length: int) -> tuple[int, int] | None:
    """Redis's GETRANGE/BITCOUNT index rules: negatives count from the end, then clamp;
    None when the range is empty."""
    if start < 0 and end < 0 and start > end:
        return None
    if start < 0:
        start += length
    if end < 0:
        end += length
    start, end = max(start, 0), max(end, 0)
    end = min(end, length - 1)
    if start > end or length == 0:
        return None
    return start, end


def cmd_strings_getrange(ctx: CommandContext, args: list[bytes]) -> Any:
    start, end = parse_redis_int(args[1]), parse_redis_int(args[2])
    value = _string(_keyspace(ctx), args[0]) or b""
    span = _clamp_range(start, end, len(value))
    return b"" if span is None else value[span[0]:span[1] + 1]


def cmd_strings_setrange(ctx: CommandContext, args: list[bytes]) -> Any:
    key, patch = args[0], args[2]
    offset = parse_redis_int(args[1])
    if offset < 0:
        raise CommandError("offset is out of range")
    ks = _keyspace(ctx)
    value = _string(ks, key)
    if value is None and not patch:
        return 0
    current = value or b""
    if not patch:
        return len(current)
    if offset + len(patch) > ctx.server.config.proto_max_bulk_len:
        raise CommandError(STRING_TOO_BIG)
    if offset > len(current):
        current += bytes(offset - len(current))
    result = current[:offset] + patch + current[offset + len(patch):]
    _store(ctx, ks, key, result)
    return len(result)


def cmd_strings_append(ctx: CommandContext, args: list[bytes]) -> Any:
    ks = _keyspace(ctx)
    value = _string(ks, args[0])
    if value is None:
        _make_room(ctx, _growth(ks, args[0], args[1]))
        ks.set(args[0], args[1])
        return len(args[1])
    if len(value) + len(args[1]) > ctx.server.config.proto_max_bulk_len:
        raise CommandError(STRING_TOO_BIG)
    result = value + args[1]
    _store(ctx, ks, args[0], result)
    return len(result)


def cmd_strings_strlen(ctx: CommandContext, args: list[bytes]) -> Any:
    value = _string(_keyspace(ctx), args[0])
    return 0 if value is None else len(value)


# ---- counters -----------------------------------------------------------------------------------
def _incr(ctx: CommandContext, key: bytes, delta: int) -> Any:
    ks = _keyspace(ctx)
    value = _string(ks, key)
    current = 0 if value is None else strict_int(value)
    if current is None:
        raise CommandError(NOT_AN_INTEGER)
    result = current + delta
    if not I64_MIN <= result <= I64_MAX:
        raise CommandError(OVERFLOW)
    _store(ctx, ks, key, str(result).encode())
    return result


def cmd_strings_incr(ctx: CommandContext, args: list[bytes]) -> Any:
    return _incr(ctx, args[0], 1)


def cmd_strings_decr(ctx: CommandContext, args: list[bytes]) -> Any:
    return _incr(ctx, args[0], -1)


def cmd_strings_incrby(ctx: CommandContext, args: list[bytes]) -> Any:
    return _incr(ctx, args[0], _int_arg(args[1]))


def cmd_strings_decrby(ctx: CommandContext, args: list[bytes]) -> Any:
    delta = _int_arg(args[1])
    if delta == I64_MIN:
        raise CommandError("decrement would overflow")
    return _incr(ctx, args[0], -delta)


def _long_double(raw: bytes) -> np.longdouble | None:
    """``raw`` read as Redis reads a float (string2ld: strtold into a long double), else None:
    an infinity is a number (the sum is refused later), NaN and out-of-range values are not."""
    if not raw or len(raw) >= 5 * 1024:
        return None
    if _INFINITY.fullmatch(raw) is not None:
        return np.longdouble("-inf" if raw.startswith(b"-") else "inf")
    if _FLOAT_TEXT.fullmatch(raw) is None:
        return None
    with np.errstate(all="ignore"):
        value = np.longdouble(raw.decode("ascii"))
    if not np.isfinite(value) or (value == 0 and _NONZERO_DIGIT.search(raw.split(b"e")[0].split(b"E")[0])):
        return None  # overflow, or an underflow to zero (strtold's ERANGE)
    return value


def format_long_double(value: np.longdouble) -> bytes:
    """Redis's human-friendly long double: 17 decimals, trailing zeros and point dropped."""
    text = np.format_float_positional(value, precision=17, unique=False, fractional=True, trim="-")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    if text == "-0":
        text = "0"
    return text.encode()


def cmd_strings_incrbyfloat(ctx: CommandContext, args: list[bytes]) -> Any:
    ks = _keyspace(ctx)
    value = _string(ks, args[0])
    current = np.longdouble(0) if value is None else _long_double(value)
    delta = _long_double(args[1])
    if current is None or delta is None:
        raise CommandError(NOT_A_FLOAT)
    with np.errstate(over="ignore", invalid="ignore"):
        result = current + delta
    if not np.isfinite(result):
        raise CommandError("increment would produce NaN or Infinity")
    text = format_long_double(result)
    _store(ctx, ks, args[0], text)
    return text


# ---- bits ---------------------------------------------------------------------------------------
def _bit_offset(raw: bytes) -> int:
    value = strict_int(raw)
    if value is None or not 0 <= value <= MAX_BIT_OFFSET:
        raise CommandError("bit offset is not an integer or out of range")
    return value


def cmd_strings_setbit(ctx: CommandContext, args: list[bytes]) -> Any:
    offset = _bit_offset(args[1])
    if args[2] not in (b"0", b"1"):
        raise CommandError("bit is not an integer or out of range")
    ks = _keyspace(ctx)
    current = _string(ks, args[0]) or b""
    byte, mask = offset >> 3, 0x80 >> (offset & 7)
    buf = bytearray(current)
    if byte >= len(buf):
        buf.extend(bytes(byte + 1 - len(buf)))
    old = 1 if buf[byte] & mask else 0
    if args[2] == b"1":
        buf[byte] |= mask
    else:
        buf[byte] &= ~mask & 0xFF
    _store(ctx, ks, args[0], bytes(buf))
    return old


def cmd_strings_getbit(ctx: CommandContext, args: list[bytes]) -> Any:
    offset = _bit_offset(args[1])
    value = _string(_keyspace(ctx), args[0]) or b""
    byte = offset >> 3
    if byte >= len(value):
        return 0
    return 1 if value[byte] & (0x80 >> (offset & 7)) else 0


def cmd_strings_bitcount(ctx: CommandContext, args: list[bytes]) -> Any:
    """Redis 7.0's order: a missing key is 0 whatever the arguments, then the range."""
    value = _string(_keyspace(ctx), args[0])
    if value is None:
        return 0
    if len(args) == 1:
        return int.from_bytes(value, "big").bit_count()
    if len(args) not in (3, 4):
        raise CommandError(SYNTAX_ERROR)
    start, end = parse_redis_int(args[1]), parse_redis_int(args[2])
    if start < 0 and end < 0 and start > end:
        return 0
    in_bits = False
    if len(args) == 4:
        unit = args[3].upper()
        if unit not in (b"BIT", b"BYTE"):
            raise CommandError(SYNTAX_ERROR)
        in_bits = unit == b"BIT"
    total = len(value) * (8 if in_bits else 1)
    span = _clamp_range(start, end, total)
    if span is None:
        return 0
    if not in_bits:
        return int.from_bytes(value[span[0]:span[1] + 1], "big").bit_count()
    first, last = span  # bit numbers, 0 = the first byte's most significant bit
    chunk = int.from_bytes(value[first >> 3:(last >> 3) + 1], "big") >> (7 - (last & 7))
    return (chunk & ((1 << (last - first + 1)) - 1)).bit_count()


# ---- LCS ----------------------------------------------------------------------------------------
def cmd_strings_lcs(ctx: CommandContext, args: list[bytes]) -> Any:
    ks = _keyspace(ctx)
    raw_a, raw_b = ks.get(args[0]), ks.get(args[1])
    if (raw_a is not None and type(raw_a) is not bytes) or (raw_b is not None and type(raw_b) is not bytes):
        raise CommandError("The specified keys must contain string values")
    a: bytes = raw_a or b""
    b: bytes = raw_b or b""
    want_len = want_idx = with_len = False
    min_len = 0
    i = 2
    while i < len(args):
        opt = args[i].upper()
        if opt == b"IDX":
            want_idx = True
        elif opt == b"LEN":
            want_len = True
        elif opt == b"WITHMATCHLEN":
            with_len = True
        elif opt == b"MINMATCHLEN" and i + 1 < len(args):
            min_len = max(0, parse_redis_int(args[i + 1]))
            i += 1
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    if want_len and want_idx:
        raise CommandError("If you want both the length and indexes, please just use IDX.")
    if (len(a) + 1) * (len(b) + 1) * 4 > ctx.server.config.proto_max_bulk_len:
        raise CommandError("Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
    if (len(a) + 1) * (len(b) + 1) > MAX_LCS_CELLS:
        raise CommandError(f"LCS of strings this long is refused here: the table would have more "
                           f"than {MAX_LCS_CELLS} cells")
    table = _lcs_table(a, b)
    total = table[len(a)][len(b)]
    if want_len:
        return total
    text, matches = _lcs_walk(a, b, table, total, min_len, with_len)
    if not want_idx:
        return text
    return {"matches": matches, "len": total}


def _lcs_table(a: bytes, b: bytes) -> list[list[int]]:
    """``table[i][j]``: the LCS length of ``a[:i]`` and ``b[:j]`` (the textbook recurrence)."""
    table = [[0] * (len(b) + 1)]
    for i in range(1, len(a) + 1):
        above = table[i - 1]
        row = [0] * (len(b) + 1)
        ch = a[i - 1]
        for j in range(1, len(b) + 1):
            if ch == b[j - 1]:
                row[j] = above[j - 1] + 1
            else:
                row[j] = above[j] if above[j] > row[j - 1] else row[j - 1]
        table.append(row)
    return table


def _lcs_walk(a: bytes, b: bytes, table: list[list[int]], total: int, min_len: int,
              with_len: bool) -> tuple[bytes, list[Any]]:
    """The LCS text and Redis's match ranges, walking the table back from the end the way
    Redis does (ties move in ``b``; a range is reported when it stops being contiguous)."""
    out = bytearray(total)
    idx = total
    matches: list[Any] = []
    unset = len(a)
    a_start = a_end = b_start = b_end = 0
    a_start = unset
    i, j = len(a), len(b)
    while i > 0 and j > 0:
        emit = False
        if a[i - 1] == b[j - 1]:
            out[idx - 1] = a[i - 1]
            if a_start == unset:
                a_start = a_end = i - 1
                b_start = b_end = j - 1
            elif a_start == i and b_start == j:
                a_start -= 1
                b_start -= 1
            else:
                emit = True
            if a_start == 0 or b_start == 0:
                emit = True
            idx -= 1
            i -= 1
            j -= 1
        else:
            if table[i - 1][j] > table[i][j - 1]:
                i -= 1
            else:
                j -= 1
            if a_start != unset:
                emit = True
        if emit:
            length = a_end - a_start + 1
            if min_len == 0 or length >= min_len:
                entry: list[Any] = [[a_start, a_end], [b_start, b_end]]
                if with_len:
                    entry.append(length)
                matches.append(entry)
            a_start = unset
    return bytes(out), matches


_W = frozenset({"write"})
_WF = frozenset({"write", "fast"})
_RF = frozenset({"readonly", "fast"})
COMMANDS: list[CommandSpec] = [
    CommandSpec("GETDEL", 2, cmd_strings_getdel, _WF, "Get a string value and delete the key",
                access=KEY0),
    CommandSpec("GETEX", -2, cmd_strings_getex, _WF, "Get a string value and set or remove its TTL",
                access=KEY0),
    CommandSpec("SETEX", 4, cmd_strings_setex, _W, "Set a value with a TTL in seconds",
                access=KEY0),
    CommandSpec("PSETEX", 4, cmd_strings_psetex, _W, "Set a value with a TTL in milliseconds",
                access=KEY0),
    CommandSpec("SETNX", 3, cmd_strings_setnx, _WF, "Set a value only if the key does not exist",
                access=KEY0),
    CommandSpec("MSETNX", -3, cmd_strings_msetnx, _W, "Set several keys only if none exists",
                access=Access.keys(0, rest=True, step=2)),
    CommandSpec("RENAME", 3, cmd_strings_rename, _W, "Rename a key, replacing the destination",
                access=Access.keys(0, 1)),
    CommandSpec("RENAMENX", 3, cmd_strings_renamenx, _WF, "Rename a key if the new name is free",
                access=Access.keys(0, 1)),
    CommandSpec("GETRANGE", 4, cmd_strings_getrange, frozenset({"readonly"}), "A substring of a value",
                access=KEY0),
    CommandSpec("SUBSTR", 4, cmd_strings_getrange, frozenset({"readonly"}), "Old name of GETRANGE",
                access=KEY0),
    CommandSpec("SETRANGE", 4, cmd_strings_setrange, _W, "Overwrite part of a value at an offset",
                access=KEY0),
    CommandSpec("APPEND", 3, cmd_strings_append, _WF, "Append to a value",
                access=KEY0),
    CommandSpec("STRLEN", 2, cmd_strings_strlen, _RF, "Length of a string value",
                access=KEY0),
    CommandSpec("INCR", 2, cmd_strings_incr, _WF, "Add 1 to an integer value",
                access=KEY0),
    CommandSpec("DECR", 2, cmd_strings_decr, _WF, "Subtract 1 from an integer value",
                access=KEY0),
    CommandSpec("INCRBY", 3, cmd_strings_incrby, _WF, "Add an integer to an integer value",
                access=KEY0),
    CommandSpec("DECRBY", 3, cmd_strings_decrby, _WF, "Subtract an integer from an integer value",
                access=KEY0),
    CommandSpec("INCRBYFLOAT", 3, cmd_strings_incrbyfloat, _WF, "Add a float to a numeric value",
                access=KEY0),
    CommandSpec("SETBIT", 4, cmd_strings_setbit, _W, "Set or clear one bit of a value",
                access=KEY0),
    CommandSpec("GETBIT", 3, cmd_strings_getbit, _RF, "One bit of a value",
                access=KEY0),
    CommandSpec("BITCOUNT", -2, cmd_strings_bitcount, frozenset({"readonly"}),
                "Number of set bits, optionally in a byte or bit range",
                access=KEY0),
    CommandSpec("LCS", -3, cmd_strings_lcs, frozenset({"readonly"}),
                "Longest common subsequence of two string values",
                access=Access.keys(0, 1)),
]
