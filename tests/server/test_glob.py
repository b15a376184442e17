"""The glob matcher against a line-by-line port of Redis's ``stringmatchlen`` (util.c)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pion.server.store.glob import compile_glob


def redis_stringmatch(pattern: bytes, string: bytes) -> bool:
    """Redis 7's recursive matcher, kept as close to the C as Python allows (the oracle)."""

    def match(p: int, s: int) -> bool:
        while p < len(pattern) and s < len(string):
            c = pattern[p]
            if c == 42:  # *
                while p + 1 < len(pattern) and pattern[p + 1] == 42:
                    p += 1
                if p + 1 == len(pattern):
                    return True
                while s < len(string):
                    if match(p + 1, s):
                        return True
                    s += 1
                return False
            if c == 63:  # ?
                s += 1
            elif c == 91:  # [
                p += 1
                negate = p < len(pattern) and pattern[p] == 94
                if negate:
                    p += 1
                matched = False
                while True:
                    if p < len(pattern) and pattern[p] == 92 and len(pattern) - p >= 2:
                        p += 1
                        if pattern[p] == string[s]:
                            matched = True
                    elif p < len(pattern) and pattern[p] == 93:
                        break
                    elif p >= len(pattern):
                        p -= 1
                        break
                    elif len(pattern) - p >= 3 and pattern[p + 1] == 45:
                        lo, hi = sorted((pattern[p], pattern[p + 2]))
                        p += 2
                        if lo <= string[s] <= hi:
                            matched = True
                    elif pattern[p] == string[s]:
                        matched = True
                    p += 1
                if negate:
                    matched = not matched
                if not matched:
                    return False
                s += 1
            else:
                if c == 92 and len(pattern) - p >= 2:
                    p += 1
                if pattern[p] != string[s]:
                    return False
                s += 1
            p += 1
            if s == len(string):
                while p < len(pattern) and pattern[p] == 42:
                    p += 1
                break
        return p == len(pattern) and s == len(string)

    return match(0, 0)


ALPHABET = b"ab*?[]^-\\"


@settings(max_examples=3000, deadline=None)
@given(pattern=st.binary(max_size=10).map(lambda b: bytes(ALPHABET[x % len(ALPHABET)] for x in b)),
       subject=st.binary(max_size=8).map(lambda b: bytes(b"ab-]^\\"[x % 6] for x in b)))
def test_glob_agrees_with_redis_on_random_patterns(pattern: bytes, subject: bytes) -> None:
    assert compile_glob(pattern).match(subject) == redis_stringmatch(pattern, subject)


def test_many_stars_against_a_long_key_answer_at_once() -> None:
    # Exponential for a backtracking translation; the atomic-group form is linear here.
    assert compile_glob(b"a*" * 20 + b"b").match(b"a" * 100_000) is False
    assert compile_glob(b"a*" * 20 + b"b").match(b"a" * 100 + b"b") is True


def test_a_pattern_with_thousands_of_stars_is_matched_segment_by_segment() -> None:
    matcher = compile_glob(b"(*?)" * 5000)
    assert matcher.match(b"(" * 1000) is False
    assert matcher.match(b"(x)" * 5000) is True
    assert matcher.match(b"(xy)" * 4999 + b"(z)") is True
    assert matcher.match(b"(xy)" * 4999 + b"(z") is False
