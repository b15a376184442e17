"""Argument parsing shared by every command family: the server's one integer parser and one
float parser, plus option and identifier helpers (texts from ``pion.server.errors``).

Every parser raises ``CommandError`` before a handler changes anything, so a
refused command records nothing.
"""

from __future__ import annotations

import math
import re

from pion.common.errors import CommandError, clip_for_echo
from pion.server.errors import NOT_A_FLOAT, NOT_AN_INTEGER, syntax_error_near

U32_MAX = 2**32 - 1
I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
_INTEGER = re.compile(rb"-?[0-9]+")  # Pion's own integer arguments: no '+', spaces or '_'
_REDIS_INTEGER = re.compile(rb"0|-?[1-9][0-9]*")  # Redis's string2ll: no leading zeros either


def word(arg: bytes) -> str:
    """An identifier (sid, namespace, pattern) as text; undecodable bytes survive round trips."""
    return arg.decode("utf-8", "surrogateescape")


def wire_word(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def parse_int(arg: bytes, what: str | None = None, lo: int = 0, hi: int = I64_MAX) -> int:
    """A decimal integer in ``lo..hi``.

    With ``what`` (Pion's commands) the errors name the argument: ``value is not an integer
    or out of range (layer)``, ``layer must be 0..511, got 600``. Without it (Redis's own
    commands) every failure is exactly Redis's ``value is not an integer or out of range``.
    """
    if len(arg) > 20 or _INTEGER.fullmatch(arg) is None:  # > 20 chars: Redis refuses too
        raise CommandError(NOT_AN_INTEGER if what is None else f"{NOT_AN_INTEGER} ({what})")
    value = int(arg)
    if not lo <= value <= hi:
        if what is None:
            raise CommandError(NOT_AN_INTEGER)
        bound = f">= {lo}" if hi == I64_MAX else f"{lo}..{hi}"
        raise CommandError(f"{what} must be {bound}, got {value}")
    return value


def parse_redis_int(arg: bytes) -> int:
    """A signed 64-bit integer argument of a Redis command (Redis's one error text), spelt as
    Redis's string2ll requires: no leading zeros and no ``-0`` either."""
    if _REDIS_INTEGER.fullmatch(arg) is None:
        raise CommandError(NOT_AN_INTEGER)
    return parse_int(arg, None, I64_MIN, I64_MAX)


def parse_float(arg: bytes, what: str, lo: float = -math.inf) -> float:
    """A finite number >= ``lo``; ``value is not a valid float (what)`` when it is not one."""
    try:
        value = float(arg)
    except ValueError:
        raise CommandError(f"{NOT_A_FLOAT} ({what})") from None
    if not math.isfinite(value) or value < lo:
        bound = "" if lo == -math.inf else f" >= {lo:g}"
        raise CommandError(f"{what} must be a finite number{bound}, got {clip_for_echo(arg)}")
    return value


def parse_ms(arg: bytes, what: str) -> float:
    """A finite, non-negative number of milliseconds."""
    return parse_float(arg, what, 0.0)


def parse_dtype(arg: bytes, allowed: tuple[str, ...]) -> str:
    """A DTYPE value, case-insensitive."""
    dtype = arg.decode("latin-1").lower()
    if dtype not in allowed:
        raise CommandError(f"unknown DTYPE '{clip_for_echo(arg)}' (expected {'|'.join(allowed)})")
    return dtype


def parse_format(arg: bytes) -> str:
    """A storage-format name as given; the codec registry decides whether it exists."""
    return arg.decode("latin-1").lower()


def option(arg: bytes) -> str:
    return arg.decode("latin-1").upper()


def syntax_error(arg: bytes) -> CommandError:
    return syntax_error_near(arg)


def need_value(args: list[bytes], i: int, n: int, name: str) -> list[bytes]:
    """The ``n`` words after option ``name`` at ``args[i]``; -ERR when some are missing."""
    values = args[i + 1:i + 1 + n]
    if len(values) < n:
        raise CommandError(f"{name} needs {n} value{'s' if n > 1 else ''}")
    return values
