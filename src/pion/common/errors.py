"""Error types shared by the server and the client library.

A command handler raises ``CommandError(code, message)``; the dispatcher turns
it into ``-CODE message`` on the wire. The codes are the prefixes redis-py maps
to exception classes, so clients raise the right exception.
"""

from __future__ import annotations

ERROR_CODES = frozenset(
    {"ERR", "WRONGTYPE", "NOAUTH", "NOPERM", "OOM", "LOADING", "READONLY", "BUSY", "MISCONF",
     "WRONGPASS", "NOPROTO", "EXECABORT",
     "COLDMISS"}  # ATTEND.PREFIX.* on a demoted entry: rehydrate with KV.PREFIX.WARM, then retry
)

MAX_ECHO_CHARS = 128


def clip_for_echo(value: bytes | str) -> str:
    """Render user input for an error message: at most 128 chars, no CR/LF."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    text = text.replace("\r", " ").replace("\n", " ")
    return text[:MAX_ECHO_CHARS]


class CommandError(Exception):
    """A command was refused; nothing it asked for was recorded."""

    def __init__(self, message: str, code: str = "ERR") -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    def wire(self) -> bytes:
        """The RESP error line without the leading '-' and trailing CRLF."""
        return f"{self.code} {self.message}".encode()


def arity_error(command: str) -> CommandError:
    """Redis's exact wording for a wrong argument count."""
    return CommandError(f"wrong number of arguments for '{command.lower()}' command")


class ConfigError(ValueError):
    """A configuration key had a bad value; the message names the key and the value."""


class CodecError(ValueError):
    """Rows cannot be encoded or decoded in a storage format (bad dim, NaN, short blob)."""
