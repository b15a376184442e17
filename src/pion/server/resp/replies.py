"""Reply values a command handler returns; the encoder renders them for RESP2 or RESP3.

Handlers return plain Python values and these small wrappers:

  SimpleString("OK")   -> +OK
  bytes / bytearray / memoryview -> bulk string (sent without copying where possible)
  str                  -> bulk string (utf-8)
  int / bool           -> integer
  float                -> RESP3 double, RESP2 bulk string
  None                 -> null ($-1 in RESP2, _ in RESP3)
  NullArray()          -> *-1 in RESP2, _ in RESP3
  list / tuple         -> array
  dict                 -> RESP3 map, RESP2 flat array [k1, v1, k2, v2, ...]
  Verbatim(text)       -> RESP3 verbatim string (txt), RESP2 bulk string
  ErrorReply(code,msg) -> -CODE msg  (inside an array; top-level errors are raised as CommandError)
  RawReply(data)       -> ``data`` as it is: a reply another worker already encoded (-w N)

A handler may also be ``async def`` (for fsync under appendfsync always, or work
run in a thread such as embedding); the dispatcher awaits it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SimpleString:
    """A RESP simple string (+...). Must not contain CR or LF."""

    text: str


@dataclass(frozen=True, slots=True)
class Verbatim:
    """Human-readable text such as INFO; RESP3 verbatim string, RESP2 bulk."""

    text: str


@dataclass(frozen=True, slots=True)
class NullArray:
    """A null array (*-1 in RESP2)."""


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An error element inside an array reply."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class RawReply:
    """A complete RESP reply, already encoded (relayed from another worker unchanged)."""

    data: bytes


OK = SimpleString("OK")


class EncodeError(TypeError):
    """A handler returned a value that has no RESP rendering (a bug in that handler).

    Defined here, not in the encoder: mypyc compiles ``encoder.py`` and cannot compile a
    subclass of a builtin exception type (``replies.py`` stays plain Python).
    """
