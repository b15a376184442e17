"""The WAL writer: fsync policies, batched group commit, and MISCONF on a failed write."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pion.server.persist import PersistOptions, Persistence, RecordType
from pion.server.persist.files import DataLayout
from pion.server.persist.wal import WalWriter


def test_always_writes_and_fsyncs_a_whole_batch_once_before_its_replies(tmp_path: Path) -> None:
    wal = WalWriter(DataLayout(tmp_path), "always")
    wal.enable_batching()
    seqs = [wal.append(RecordType.SET, {"key": b"k%d" % i, "value": b"x" * 100, "expire_at_ms": None})
            for i in range(64)]
    assert (seqs, wal.written_seq, wal.fsyncs, wal.batch_pending) == (list(range(1, 65)), 0, 0, True)
    wal.flush_batch()  # the network layer's before_reply hook
    assert (wal.written_seq, wal.synced_seq, wal.fsyncs, wal.batch_pending) == (64, 64, 1, False)
    wal.close()


def test_everysec_syncs_in_the_background_within_about_a_second(tmp_path: Path) -> None:
    wal = WalWriter(DataLayout(tmp_path), "everysec")
    wal.append(RecordType.FLUSHALL, {})
    assert wal.synced_seq == 0
    deadline = time.monotonic() + 3.0
    while wal.synced_seq < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert wal.synced_seq == 1
    wal.close()


def test_no_policy_never_fsyncs_until_close(tmp_path: Path) -> None:
    wal = WalWriter(DataLayout(tmp_path), "no")
    wal.append(RecordType.FLUSHALL, {})
    time.sleep(1.2)
    assert wal.fsyncs == 0
    wal.close()
    assert wal.fsyncs == 1


def test_an_unknown_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="appendfsync"):
        WalWriter(DataLayout(tmp_path), "sometimes")  # type: ignore[arg-type]


_CHILD = textwrap.dedent("""
    import json, os, resource, signal, sys
    from pion.common.errors import CommandError
    from pion.server.persist import PersistOptions, Persistence, RecordType
    sys.path.insert(0, sys.argv[2])
    from persist.toystore import ToyStore
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))
    persist = Persistence(PersistOptions(__import__("pathlib").Path(sys.argv[1]), appendfsync="always"))
    store = ToyStore(persist)
    persist.recover(store.apply)
    persist.set_snapshot_source(store.snapshot_records)
    out = {"acked": 0}
    value = os.urandom(20000)
    for i in range(100):
        try:
            store.set(b"k", value + bytes([i]))   # the same key again and again: data stays small
            out["acked"] += 1
        except CommandError as e:
            out["code"], out["message"] = e.code, e.message
            break
    out["wal_size"] = os.path.getsize(persist.layout.wal_path)
    out["wal_bytes"] = persist.wal_bytes
    try:
        store.set(b"other", b"x" * 30000)
    except CommandError as e:
        out["still"] = e.code
    out["value_kept"] = store.keys[b"k"] == value + bytes([out["acked"] - 1])
    persist.save()                     # the snapshot is small; the WAL is emptied
    store.set(b"after", b"resumed")    # space returned: writes work again
    out["misconf_after"] = persist.wal.misconf
    persist.close()
    print(json.dumps(out))
""")


def test_a_write_past_the_file_size_limit_gives_misconf_cuts_the_record_and_resumes(tmp_path: Path) -> None:
    tests_dir = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), str(tests_dir)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["code"] == "MISCONF"
    assert out["message"].startswith("Errors writing to the WAL")
    assert out["still"] == "MISCONF"
    assert out["value_kept"] is True
    assert out["misconf_after"] is None
    # The partial record was cut: the WAL holds exactly the acknowledged records.
    per_record = out["wal_size"] / out["acked"]
    assert out["wal_size"] % round(per_record) == 0
    recovered = Persistence(PersistOptions(tmp_path, appendfsync="no"))
    from persist.toystore import ToyStore
    store = ToyStore()
    recovered.recover(store.apply)
    recovered.close()
    assert store.keys[b"after"] == b"resumed"
    assert len(store.keys[b"k"]) == 20001
    assert store.keys[b"k"][-1] == out["acked"] - 1
    assert b"other" not in store.keys


def test_auto_snapshot_starts_when_the_wal_passes_its_limit(tmp_path: Path) -> None:
    from persist.toystore import ToyStore
    persist = Persistence(PersistOptions(tmp_path, appendfsync="no", wal_max_bytes=50_000))
    store = ToyStore(persist)
    persist.recover(store.apply)
    persist.set_snapshot_source(store.snapshot_records)

    async def main() -> None:
        for i in range(10):
            store.set(b"k", bytes([i]) * 10_000)
            await asyncio.sleep(0)
        while persist.bgsave_in_progress:
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert persist.saves >= 1
    assert persist.wal_bytes < 10 * 10_000  # less than everything appended: snapshots cut it
    persist.close()
    again = ToyStore()
    Persistence(PersistOptions(tmp_path, appendfsync="no")).recover(again.apply)
    assert again.keys == {b"k": bytes([9]) * 10_000}


def test_a_failed_fsync_under_always_answers_misconf(tmp_path: Path) -> None:
    import os

    from pion.common.errors import CommandError
    layout = DataLayout(tmp_path)
    wal = WalWriter(layout, "always")
    wal.append(RecordType.FLUSHALL, {})
    os.close(wal._fd)  # the device "fails": fdatasync now raises OSError
    with pytest.raises(CommandError) as err:
        wal.flush_batch()
    assert err.value.code == "MISCONF"
    assert wal.misconf is not None
    wal._fd = os.open(layout.wal_path, os.O_WRONLY | os.O_APPEND)
    wal.close()
