"""Inline commands (``printf 'PING\\r\\n' | nc``): one text line, words split like Redis.

Redis's ``sdssplitargs`` rules: words are separated by spaces/tabs; ``"..."`` supports the
escapes ``\\n \\r \\t \\b \\a \\\\ \\" \\xHH``; ``'...'`` supports ``\\'``; a closing quote
must be followed by a space or the end of the line, else the request is malformed.
Example: ``SET "a b" 'it\\'s'`` -> ``[b"SET", b"a b", b"it's"]``.
"""

from __future__ import annotations

from typing import Final

MAX_INLINE_BYTES: Final = 64 * 1024

# Final: C statics in the compiled build (``pion/_compiled.py``), not module-dict lookups.
_ESCAPES: Final = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_HEX: Final = b"0123456789abcdefABCDEF"
_SPACES: Final = b" \t\r\n\x0b\x0c"  # sdssplitargs's isspace()
_split: Final = bytes.split  # (a static: no method lookup on the line per call)


class InlineError(ValueError):
    """The inline line cannot be split (the message follows ``Protocol error: ``)."""


def split_inline(line: bytes) -> list[bytes]:
    """Split one inline request line (without its line ending) into words.

    The quote test looks for an int, not for ``b'"'``: CPython's ``bytes in bytes`` first
    tries the needle as an int and formats (then clears) a TypeError message every time
    before it searches (``PyUnicode_FromFormatV``, 3% of a pipelined inline PING's server
    CPU), and ``line.find(34)`` is a method call with an argument tuple (3.5%; issue 13).
    """
    if 34 not in line and 39 not in line:  # no '"' and no "'"
        return _split(line)  # the common case; same whitespace set as below
    words: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACES:
            i += 1
        if i >= n:
            return words
        word = bytearray()
        quote = 0
        while True:
            if i >= n:
                if quote:
                    raise InlineError("unbalanced quotes in request")
                break
            c = line[i]
            if quote == 34:  # "
                if c == 92 and i + 3 < n and line[i + 1] == ord("x") \
                        and line[i + 2] in _HEX and line[i + 3] in _HEX:
                    word.append(int(line[i + 2:i + 4], 16))
                    i += 4
                    continue
                if c == 92 and i + 1 < n:
                    i += 1
                    word.append(_ESCAPES.get(line[i], line[i]))
                elif c == 34:
                    if i + 1 < n and line[i + 1] not in _SPACES:
                        raise InlineError("unbalanced quotes in request")
                    i += 1
                    break
                else:
                    word.append(c)
            elif quote == 39:  # '
                if c == 92 and i + 1 < n and line[i + 1] == 39:
                    i += 1
                    word.append(39)
                elif c == 39:
                    if i + 1 < n and line[i + 1] not in _SPACES:
                        raise InlineError("unbalanced quotes in request")
                    i += 1
                    break
                else:
                    word.append(c)
            elif c in _SPACES:
                break
            elif c == 34 or c == 39:
                quote = c
            else:
                word.append(c)
            i += 1
        words.append(bytes(word))
