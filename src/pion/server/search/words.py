"""A cursor over a command's argument words, shared by the FT.* parsers.

RediSearch words its "argument missing" error differently per command (FT.CREATE says
``Expected an argument, but none provided``, FT.HYBRID ``Missing argument for``); the
cursor takes that wording once, so the parsers share everything else.
"""

from __future__ import annotations

from pion.common.errors import CommandError

EXPECTED_AN_ARGUMENT = "Bad arguments for {what}: Expected an argument, but none provided"
MISSING_ARGUMENT = "Missing argument for {what}"
_NOT_A_NUMBER = "Bad arguments for {what}: Could not convert argument to expected type"


def text(raw: bytes) -> str:
    """An argument as str; bytes that are not UTF-8 survive the round trip."""
    return raw.decode("utf-8", "surrogateescape")


def count(raw: bytes, what: str) -> int:
    """A non-negative count of at most 9 digits (RediSearch's limit on list lengths)."""
    if not raw.isdigit() or len(raw) > 9:
        raise CommandError(_NOT_A_NUMBER.format(what=what))
    return int(raw)


class Words:
    """The words of one command, read front to back."""

    def __init__(self, args: list[bytes], missing: str = EXPECTED_AN_ARGUMENT) -> None:
        self.args = args
        self.pos = 0
        self._missing = missing

    def more(self) -> bool:
        return self.pos < len(self.args)

    def peek(self) -> str:
        """The next word upper-cased (for keyword matching), or "" at the end."""
        return text(self.args[self.pos]).upper() if self.more() else ""

    def take(self, what: str) -> bytes:
        if not self.more():
            raise CommandError(self._missing.format(what=what))
        self.pos += 1
        return self.args[self.pos - 1]

    def number(self, what: str) -> float:
        raw = self.take(what)
        try:
            return float(raw)
        except ValueError:
            raise CommandError(_NOT_A_NUMBER.format(what=what)) from None

    def count(self, what: str) -> int:
        return count(self.take(what), what)
