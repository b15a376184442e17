"""Batched WAL writes (one write per event-loop batch): never an acknowledgement before the write."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis

from support.procs import start_server


def _file_limit(max_bytes: int):  # type: ignore[no-untyped-def]
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return limit


@pytest.mark.parametrize("policy", ["everysec", "always"])
def test_a_batch_that_cannot_be_written_answers_misconf_and_every_ok_survives_kill9(
        tmp_path: Path, policy: str) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", policy, "--loglevel", "warning",
                          preexec_fn=_file_limit(64 * 1024))
    try:
        r = server.client()
        pipe = r.pipeline(transaction=False)
        for i in range(3000):
            pipe.set(f"k{i}", f"value-{i}-" + "x" * 40)
        replies = pipe.execute(raise_on_error=False)
        acked = [i for i, reply in enumerate(replies) if reply is True]
        errors = [str(reply) for reply in replies if reply is not True]
        assert 0 < len(acked) < 3000
        assert acked == list(range(len(acked)))  # after the first failed batch every write is refused
        assert errors and all(e.startswith("MISCONF Errors writing to the WAL") for e in errors), errors[:2]
        assert all(type(reply) is redis.ResponseError for reply in replies[len(acked):])
        assert r.get("k0") == b"value-0-" + b"x" * 40  # reads keep working
        assert r.info("persistence")["wal_last_write_status"] == "err"
        server.stop(signal.SIGKILL)
        server = start_server(tmp_path / "data", "--appendfsync", policy)
        r = server.client()
        for i in acked:
            assert r.get(f"k{i}") == f"value-{i}-".encode() + b"x" * 40
    finally:
        server.stop()


def test_under_always_a_pipelined_batch_shares_one_fsync(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        r = server.client()
        before = r.info("persistence")["wal_fsyncs"]
        pipe = r.pipeline(transaction=False)
        for i in range(1000):
            pipe.set(f"k{i}", "v")
        assert pipe.execute() == [True] * 1000
        fsyncs = r.info("persistence")["wal_fsyncs"] - before
        assert 1 <= fsyncs < 100
        assert r.info("persistence")["wal_synced_seq"] == r.info("persistence")["wal_last_seq"]
    finally:
        server.stop()


_CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    from pion.common.errors import CommandError
    from pion.server.persist import PersistOptions, Persistence
    sys.path.insert(0, sys.argv[2])
    from persist.toystore import ToyStore
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    persist = Persistence(PersistOptions(Path(sys.argv[1]), appendfsync="no"))
    store = ToyStore(persist)
    persist.recover(store.apply)
    persist.enable_batching()
    out = {}
    for i in range(100):
        store.set(b"k%d" % i, b"v" * 50)      # buffered: applied now, written by flush_batch
    try:
        persist.flush_batch()
    except CommandError as e:
        out["flush"] = e.code
    try:
        store.set(b"refused", b"x")           # retries the buffer first, which fails again
    except CommandError as e:
        out["append"] = e.code
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space returns
    persist.flush_batch()
    out["misconf_after"] = persist.wal.misconf
    persist.close()
    print(json.dumps(out))
""")


def test_a_failed_batch_keeps_its_records_and_writes_them_once_the_disk_recovers(tmp_path: Path) -> None:
    tests_dir = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), str(tests_dir)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"flush": "MISCONF", "append": "MISCONF", "misconf_after": None}
    from persist.toystore import ToyStore

    from pion.server.persist import PersistOptions, Persistence
    store = ToyStore()
    recovered = Persistence(PersistOptions(tmp_path, appendfsync="no"))
    recovered.recover(store.apply)
    recovered.close()
    assert store.keys == {b"k%d" % i: b"v" * 50 for i in range(100)}  # in order, none lost, none refused
