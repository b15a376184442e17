"""Redis glob patterns (KEYS, SCAN MATCH, V.LIST, CONFIG GET) with a bounded cost.

Semantics are Redis's ``stringmatchlen``: ``*`` any run of bytes, ``?`` one byte,
``[abc]`` / ``[^abc]`` / ``[a-z]`` (a reversed range is swapped, ``[]`` matches nothing and
``[^]`` any one byte, an unterminated ``[`` runs to the end of the pattern), ``\\x`` the
byte ``x`` (also inside a class); a trailing lone ``\\`` is a literal backslash; an empty
key matches only the empty pattern (``KEYS *`` and ``SCAN`` without MATCH list every key).

Why not translate ``*`` to ``.*``: a backtracking engine then needs time exponential in
the number of stars (``a*a*a*…*b`` against a long key never finished). Every atom other
than ``*`` matches exactly one byte, so the segments between stars have fixed lengths and
the leftmost place for each middle segment is always a right one: the pattern compiles to
``S0 (?>.*?S1) … (?>.*?Sk-1) .*Sk\\Z`` — atomic groups commit to the leftmost match and
never revisit it, so one match costs O(len(key) × len(pattern)).

Example: ``compile_glob(b"user:[0-9]*:name")`` matches ``b"user:7:x:name"``, not
``b"user:x:name"``.
"""

from __future__ import annotations

import functools
import re

_ANY_BYTE = b"."


def _byte_class(members: set[int]) -> bytes:
    """A regex class for an exact set of byte values (every byte written as ``\\xNN``)."""
    if not members:
        return b"(?!)"
    if len(members) == 256:
        return _ANY_BYTE
    ordered = sorted(members)
    parts = []
    run_start = prev = ordered[0]
    for value in ordered[1:] + [-1]:
        if value == prev + 1:
            prev = value
            continue
        if run_start == prev:
            parts.append(b"\\x%02x" % run_start)
        else:
            parts.append(b"\\x%02x-\\x%02x" % (run_start, prev))
        run_start = prev = value
    return b"[" + b"".join(parts) + b"]"


def _parse_class(pattern: bytes, i: int) -> tuple[bytes, int]:
    """The class starting after ``[`` at ``i``; returns its regex and the index after it."""
    n = len(pattern)
    negate = i < n and pattern[i] == 94  # ^
    if negate:
        i += 1
    members: set[int] = set()
    while i < n:
        c = pattern[i]
        if c == 92 and i + 1 < n:  # backslash: the next byte literally
            members.add(pattern[i + 1])
            i += 2
            continue
        if c == 93:  # ]
            i += 1
            break
        if i + 2 < n and pattern[i + 1] == 45:  # a-z (Redis takes any third byte, even ])
            lo, hi = sorted((c, pattern[i + 2]))
            members.update(range(lo, hi + 1))
            i += 3
            continue
        members.add(c)
        i += 1
    if negate:
        members = set(range(256)) - members
    return _byte_class(members), i


MAX_COMPILED_SEGMENTS = 256  # beyond this, compiling one regex costs more than matching


class GlobMatcher:
    """A compiled glob. ``match(key)`` returns a truthy value when the whole key matches.

    Patterns with few stars are one regex (C speed); a pattern with very many stars
    (``(*?)`` × 50,000) would take seconds to compile, so it is matched segment by segment
    instead, after a length check that rejects most keys at once.
    """

    def __init__(self, segments: list[list[bytes]]) -> None:
        sources = [b"".join(atoms) for atoms in segments]
        self.min_len = sum(len(atoms) for atoms in segments)
        self._matches_empty = segments == [[]]  # Redis: only "" matches "" (KEYS * aside)
        self._regex: re.Pattern[bytes] | None = None
        if len(segments) <= MAX_COMPILED_SEGMENTS:
            if len(sources) == 1:
                regex = sources[0] + b"\\Z"
            else:
                middle = b"".join(b"(?>.*?" + seg + b")" for seg in sources[1:-1] if seg)
                regex = sources[0] + middle + b".*" + sources[-1] + b"\\Z"
            self._regex = re.compile(regex, re.DOTALL)
            return
        self._first = _segment(sources[0])
        self._middle = [_segment(seg) for seg in sources[1:-1] if seg]
        self._last = _segment(sources[-1])
        self._last_len = len(segments[-1])

    def match(self, subject: bytes) -> bool:
        if not subject:
            return self._matches_empty
        if self._regex is not None:
            return self._regex.match(subject) is not None
        if len(subject) < self.min_len:
            return False
        found = self._first.match(subject)
        if found is None:
            return False
        pos = found.end()  # advanced past each middle segment's leftmost match
        for segment in self._middle:
            found = segment.search(subject, pos)
            if found is None:
                return False
            pos = found.end()
        tail = len(subject) - self._last_len
        return tail >= pos and self._last.fullmatch(subject, tail) is not None


@functools.lru_cache(maxsize=4096)
def _segment(source: bytes) -> re.Pattern[bytes]:
    return re.compile(source, re.DOTALL)


@functools.lru_cache(maxsize=256)
def compile_glob(pattern: bytes) -> GlobMatcher:
    """Compile a Redis glob; ``.match(key)`` is true when the whole key matches."""
    segments: list[list[bytes]] = [[]]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == 42:  # *
            if segments[-1] or len(segments) == 1:
                segments.append([])
            i += 1
        elif c == 63:  # ?
            segments[-1].append(_ANY_BYTE)
            i += 1
        elif c == 91:  # [
            atom, i = _parse_class(pattern, i + 1)
            segments[-1].append(atom)
        elif c == 92 and i + 1 < n:
            segments[-1].append(re.escape(pattern[i + 1:i + 2]))
            i += 2
        else:
            segments[-1].append(re.escape(pattern[i:i + 1]))
            i += 1
    return GlobMatcher(segments)


def glob_match(pattern: bytes, subject: bytes) -> bool:
    """True when ``subject`` matches the Redis glob ``pattern`` as a whole."""
    return compile_glob(pattern).match(subject)
