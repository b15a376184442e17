"""The pieces of -w N that need no process: the reply scanner and the shared directory."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from pion.server.resp.reply_scan import ReplyFormatError, reply_end
from pion.server.workers.directory import KIND_PREFIX, KIND_SESSION, DirEntry, Directory, DirectoryFull


@pytest.mark.parametrize(("data", "end"), [
    (b"+OK\r\n", 5),
    (b"-ERR x\r\n:1\r\n", 8),
    (b"$3\r\nabc\r\n", 9),
    (b"$-1\r\n", 5),
    (b"*2\r\n$1\r\na\r\n:5\r\n+OK\r\n", 15),
    (b"%1\r\n+k\r\n*1\r\n,1.5\r\n", 18),
    (b"|1\r\n+a\r\n+b\r\n:7\r\n", 16),
    (b"~0\r\n", 4),
    (b"*-1\r\n", 5),
    (b"=8\r\ntxt:abcd\r\n", 14),
])
def test_reply_end_finds_the_end_of_one_whole_reply(data: bytes, end: int) -> None:
    assert reply_end(data, 0) == end


@pytest.mark.parametrize("data", [b"", b"+OK", b"$5\r\nab", b"*2\r\n:1\r\n", b"%1\r\n+k\r\n"])
def test_reply_end_is_none_while_the_reply_is_incomplete(data: bytes) -> None:
    assert reply_end(data, 0) is None


def test_reply_end_refuses_bytes_that_are_not_resp() -> None:
    with pytest.raises(ReplyFormatError):
        reply_end(b"?what\r\n", 0)


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[Directory]:
    made = Directory.create(64, tmp_path)
    yield made
    made.destroy()


def test_a_published_name_reads_back_with_every_field(directory: Directory) -> None:
    directory.publish(KIND_PREFIX, "app|a", 1, complete=True, tokens=2048, prefill_ms=12.5, schema="fp16")
    assert directory.get(KIND_PREFIX, "app|a") == DirEntry(owner=1, kind=KIND_PREFIX, complete=True,
                                                           tokens=2048, prefill_ms=12.5, schema="fp16")
    assert directory.get(KIND_SESSION, "app|a") is None  # kinds are separate names


def test_claim_keeps_the_first_owner(directory: Directory) -> None:
    assert directory.claim(KIND_SESSION, "s", 0) == 0
    assert directory.claim(KIND_SESSION, "s", 1) == 0
    entry = directory.get(KIND_SESSION, "s")
    assert entry is not None and (entry.owner, entry.tokens, math.isnan(entry.prefill_ms or math.nan)) == (0, 0, True)


def test_remove_only_forgets_a_name_of_its_owner(directory: Directory) -> None:
    directory.publish(KIND_SESSION, "s", 1)
    assert directory.remove(KIND_SESSION, "s", 0) is False
    assert directory.remove(KIND_SESSION, "s", 1) is True
    assert directory.get(KIND_SESSION, "s") is None


def test_clear_owner_forgets_one_worker_and_keeps_the_others(directory: Directory) -> None:
    for i in range(20):
        directory.publish(KIND_SESSION, f"s{i}", i % 2, tokens=i)
    assert directory.clear_owner(1) == 10
    assert [directory.get(KIND_SESSION, f"s{i}") is None for i in range(4)] == [False, True, False, True]
    assert directory.get(KIND_SESSION, "s18") == DirEntry(0, KIND_SESSION, False, 18, None, "")


def test_create_and_drop_churn_never_fills_the_table(directory: Directory) -> None:
    for i in range(1000):  # 64 slots: freed slots must come back
        directory.publish(KIND_SESSION, f"n{i}", 0)
        assert directory.remove(KIND_SESSION, f"n{i}", 0) is True
    directory.publish(KIND_SESSION, "last", 0)
    assert directory.get(KIND_SESSION, "last") is not None


def test_a_full_table_refuses_a_new_name_and_keeps_the_old(directory: Directory) -> None:
    for i in range(64):
        directory.publish(KIND_SESSION, f"n{i}", 0)
    with pytest.raises(DirectoryFull, match="--directory-slots"):
        directory.publish(KIND_SESSION, "one-more", 0)
    assert directory.get(KIND_SESSION, "n63") is not None


def test_totals_count_complete_prefixes_and_their_tokens(directory: Directory) -> None:
    directory.publish(KIND_PREFIX, "a", 0, complete=True, tokens=10)
    directory.publish(KIND_PREFIX, "b", 1, complete=True, tokens=5)
    directory.publish(KIND_PREFIX, "c", 1, complete=False, tokens=0)
    directory.publish(KIND_SESSION, "a_pk", 0, complete=True, tokens=10)
    assert directory.totals() == (2, 15)
