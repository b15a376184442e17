"""The WAL's per-batch hooks on the network layer (``binding.ReplyHooks``): what
``Persistence.flush_batch``/``batch_pending`` did, before recovery, while serving and after
shutdown closed the WAL (issue 13: compiled, so no Python frame per reply batch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pion.server.persist import PersistOptions, Persistence, RecordType
from pion.server.persist.binding import ReplyHooks


def _sink(rtype: int, fields: dict[str, Any]) -> None:
    raise AssertionError("an empty data directory replays nothing")


def test_reply_hooks_have_nothing_to_do_before_recovery_opened_the_wal(tmp_path: Path) -> None:
    persist = Persistence(PersistOptions(tmp_path, appendfsync="always"))
    hooks = ReplyHooks(persist)
    assert hooks.batch_pending() is False
    hooks.flush_batch()  # no WAL yet: nothing to write, nothing raised
    assert persist.wal is None
    persist.close()


def test_reply_hooks_report_a_buffered_record_and_write_it_once(tmp_path: Path) -> None:
    persist = Persistence(PersistOptions(tmp_path, appendfsync="always"))
    persist.recover(_sink)
    persist.enable_batching()
    hooks = ReplyHooks(persist)
    assert hooks.batch_pending() is False
    persist.append(RecordType.SET, {"key": b"k", "value": b"v", "expire_at_ms": None})
    wal = persist.wal
    assert wal is not None
    assert (hooks.batch_pending(), wal.written_seq, wal.fsyncs) == (True, 0, 0)
    hooks.flush_batch()
    assert (hooks.batch_pending(), wal.written_seq, wal.synced_seq, wal.fsyncs) == (False, 1, 1, 1)
    hooks.flush_batch()  # nothing pending: no second write or fsync
    assert (wal.written_seq, wal.fsyncs) == (1, 1)
    persist.close()
    assert hooks.batch_pending() is False  # shutdown closed the WAL: the hooks see None
    hooks.flush_batch()
