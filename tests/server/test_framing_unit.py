"""RequestFramer without a socket: request boundaries across every split, Redis's limits."""

from __future__ import annotations

import random

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.server.resp.framing import MAX_UNAUTH_BULK_LEN, RequestFramer, encode_words

MAX_BULK = 512 * 1024 * 1024
# Values that look like commands or frames: none of them may ever run as one.
TRAPS = [b"FLUSHALL", b"*1\r\n$8\r\nFLUSHALL\r\n", b"PING\r\n", b"\r\n", b"$8\r\n", b"*",
         b"*-1\r\n", b"\x00\xff\r\n*3\r\n", b""]


def encode(words: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%b\r\n" % (len(w), w) for w in words)


def random_pipeline(rng: random.Random, n_requests: int) -> tuple[bytes, list[list[bytes]]]:
    """A pipeline of multibulk and inline requests and the requests it stands for."""
    stream = b""
    expected: list[list[bytes]] = []
    for i in range(n_requests):
        kind = rng.random()
        if kind < 0.15:
            stream += b"PING\r\n"
            expected.append([b"PING"])
        elif kind < 0.25:
            stream += b"ECHO 'a b' \"c\\r\"\n"
            expected.append([b"ECHO", b"a b", b"c\r"])
        elif kind < 0.3:
            stream += b"*0\r\n*-1\r\n"  # ignored, like Redis
        else:
            value = rng.choice(TRAPS) + bytes(rng.randrange(256) for _ in range(rng.randrange(6)))
            words = [b"SET", b"k%d" % i, value]
            stream += encode(words)
            expected.append(words)
    return stream, expected


def run_framer(chunks: list[bytes], authenticated: bool = True) -> tuple[list[list[bytes]],
                                                                        RequestFramer]:
    framer = RequestFramer(MAX_BULK)
    reader = hiredis.Reader()
    got: list[list[bytes]] = []
    for chunk in chunks:
        framed = framer.feed(chunk, authenticated=authenticated)
        assert framed.error is None
        for piece in framed.pieces:
            reader.feed(encode_words(piece) if isinstance(piece, list) else piece)
        while (request := reader.gets()) is not False:
            got.append(request)
    return got, framer


def test_every_split_point_of_a_pipeline_gives_the_same_requests() -> None:
    stream, expected = random_pipeline(random.Random(1974), 40)
    for cut in range(1, len(stream)):
        got, framer = run_framer([stream[:cut], stream[cut:]])
        assert got == expected, f"split at byte {cut}"
        assert framer.at_boundary is True


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), cuts=st.lists(st.integers(1, 10**6), max_size=12))
def test_random_multi_split_points_give_the_same_requests(seed: int, cuts: list[int]) -> None:
    stream, expected = random_pipeline(random.Random(seed), 25)
    points = sorted({c % len(stream) for c in cuts} - {0})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    got, framer = run_framer(chunks)
    assert got == expected
    assert framer.at_boundary is True


def test_a_read_that_ends_between_two_elements_is_not_at_a_boundary() -> None:
    framer = RequestFramer(MAX_BULK)
    framed = framer.feed(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n", authenticated=True)
    assert framed.error is None
    assert framer.at_boundary is False
    framed = framer.feed(b"$8\r\nFLUSHALL\r\n", authenticated=True)
    assert b"".join(bytes(p) for p in framed.pieces if not isinstance(p, list)) == \
        b"$8\r\nFLUSHALL\r\n"
    assert framer.at_boundary is True


@pytest.mark.parametrize(("stream", "authenticated", "error"), [
    (b"*1048577\r\n", True, "invalid multibulk length"),
    (b"*3000000000\r\n", True, "invalid multibulk length"),
    (b"*abc\r\n", True, "invalid multibulk length"),
    (b"*+3\r\n", True, "invalid multibulk length"),
    (b"*03\r\n", True, "invalid multibulk length"),
    (b"*11\r\n", False, "unauthenticated multibulk length"),
    (b"*1\r\n$600000000\r\n", True, "invalid bulk length"),
    (b"*1\r\n$-3\r\n", True, "invalid bulk length"),
    (b"*1\r\n$%d\r\n" % (MAX_UNAUTH_BULK_LEN + 1), False, "unauthenticated bulk length"),
    (b"*2\r\n:1\r\n", True, "expected '$', got ':'"),
    (b"*" + b"9" * 70_000, True, "too big mbulk count string"),
    (b"*1\r\n$" + b"9" * 70_000, True, "too big bulk count string"),
    (b"GET " + b"x" * 70_000, True, "too big inline request"),
    (b'ECHO "open\r\n', True, "unbalanced quotes in request"),
])
def test_limits_are_checked_at_the_header_with_redis_texts(stream: bytes, authenticated: bool,
                                                          error: str) -> None:
    framed = RequestFramer(MAX_BULK).feed(stream, authenticated=authenticated)
    assert framed.error == error


def test_the_requests_before_a_bad_frame_are_still_handed_on() -> None:
    framed = RequestFramer(MAX_BULK).feed(encode([b"PING"]) + b"*1\r\n$-3\r\n",
                                          authenticated=True)
    assert framed.error == "invalid bulk length"
    handed_on = b"".join(bytes(p) for p in framed.pieces)  # type: ignore[arg-type]
    assert handed_on.startswith(encode([b"PING"]))


def test_limits_before_auth_stop_at_ten_arguments_of_16_kb() -> None:
    ten = encode([b"x" * MAX_UNAUTH_BULK_LEN] * 10)
    framed = RequestFramer(MAX_BULK).feed(ten, authenticated=False)
    assert framed.error is None
    assert b"".join(bytes(p) for p in framed.pieces) == ten  # type: ignore[arg-type]


def test_a_large_declared_array_is_held_until_its_bytes_arrive() -> None:
    framer = RequestFramer(MAX_BULK)
    header = b"*2000\r\n"
    framed = framer.feed(header + b"$1\r\na\r\n" * 10, authenticated=True)
    assert framed.pieces == []  # nothing reaches hiredis, so nothing is allocated for 2000
    rest = b"$1\r\na\r\n" * 1990
    framed = framer.feed(rest, authenticated=True)
    assert framed.pieces == [[b"a"] * 2000]  # parsed here: hiredis is capped at 1024
    assert framer.at_boundary is True


def test_one_request_mode_stops_after_each_request() -> None:
    stream = encode([b"AUTH", b"pw"]) + encode([b"SET", b"k", b"v" * 20_000])
    framer = RequestFramer(MAX_BULK)
    framed = framer.feed(stream, authenticated=False, one_request=True)
    assert framed.error is None
    assert framed.rest == encode([b"SET", b"k", b"v" * 20_000])
    framed = framer.feed(framed.rest, authenticated=True, one_request=True)
    assert framed.error is None
    assert framed.rest == b""


def test_first_inline_offset_finds_an_inline_line_after_whole_frames() -> None:
    head = encode([b"PING"]) + encode([b"GET", b"k"])
    assert RequestFramer.first_inline_offset(head + b"PING\r\n") == len(head)
    assert RequestFramer.first_inline_offset(head + b"*2000\r\n") == len(head)
    assert RequestFramer.first_inline_offset(head + b"*-5\r\n") == len(head)
    assert RequestFramer.first_inline_offset(head) is None
    assert RequestFramer.first_inline_offset(b"*1\r\n:1\r\nPING\r\n") is None


def test_hiredis_is_capped_at_the_held_array_size_on_this_build() -> None:
    from pion.server.net import new_reader
    from pion.server.resp.framing import HOLD_ARRAYS_OVER
    from pion.server.resp.hiredis_limits import capping_supported

    assert capping_supported() is True  # the CI's hiredis; otherwise reads are pre-scanned
    reader = new_reader()
    reader.feed(b"*%d\r\n" % (HOLD_ARRAYS_OVER + 1))
    with pytest.raises(hiredis.ProtocolError):
        reader.gets()
    reader = new_reader()
    reader.feed(encode([b"x"] * HOLD_ARRAYS_OVER))
    assert reader.gets() == [b"x"] * HOLD_ARRAYS_OVER
