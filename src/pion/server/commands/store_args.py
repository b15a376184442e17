"""Argument parsing shared by the V.* and KV.PREFIX.* families (Redis's wording for bad values).

Every parser raises ``CommandError`` before a handler changes anything, so a
refused command records nothing.
"""

from __future__ import annotations

import math

from pion.common.errors import CommandError, clip_for_echo

NOT_AN_INTEGER = "value is not an integer or out of range"
U32_MAX = 2**32 - 1
I64_MAX = 2**63 - 1


def word(arg: bytes) -> str:
    """An identifier (sid, namespace, pattern) as text; undecodable bytes survive round trips."""
    return arg.decode("utf-8", "surrogateescape")


def wire_word(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def parse_int(arg: bytes, what: str, lo: int = 0, hi: int = I64_MAX) -> int:
    """A decimal integer in ``lo..hi``; Redis's wording when it is not a number."""
    try:
        value = int(arg)
    except ValueError:
        raise CommandError(f"{NOT_AN_INTEGER} ({what})") from None
    if not arg.strip(b"-").isdigit():  # int() also accepts ' 1', '1_0', '+1'
        raise CommandError(f"{NOT_AN_INTEGER} ({what})")
    if not lo <= value <= hi:
        bound = f">= {lo}" if hi == I64_MAX else f"{lo}..{hi}"
        raise CommandError(f"{what} must be {bound}, got {value}")
    return value


def parse_ms(arg: bytes, what: str) -> float:
    """A finite, non-negative number of milliseconds."""
    try:
        value = float(arg)
    except ValueError:
        raise CommandError(f"value is not a valid float ({what})") from None
    if not math.isfinite(value) or value < 0:
        raise CommandError(f"{what} must be a finite number >= 0, got {clip_for_echo(arg)}")
    return value


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
    return CommandError(f"syntax error near '{clip_for_echo(arg)}'")


def need_value(args: list[bytes], i: int, n: int, name: str) -> list[bytes]:
    """The ``n`` words after option ``name`` at ``args[i]``; -ERR when some are missing."""
    values = args[i + 1:i + 1 + n]
    if len(values) < n:
        raise CommandError(f"{name} needs {n} value{'s' if n > 1 else ''}")
    return values
