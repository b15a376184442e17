"""WAL and snapshot files written by the code before the typed record layer still load, and
today's code writes the same bytes (see ``golden_persist.py`` for the script and the files)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from persist.golden_persist import GOLDEN_DIR, describe, recover_only, write_golden
from pion.server.persist.snapshot import SNAP_HEADER_SIZE, read_snapshot_header
from support.procs import start_server

EXPECTED = json.loads((GOLDEN_DIR / "expected.json").read_text())
SNAPSHOT = "pion.vstore.0"
WAL = "pion.vstore.0.wal"


@pytest.mark.parametrize("name", ["wal_only", "with_snapshot"])
def test_golden_files_written_by_the_earlier_code_load_to_exactly_the_recorded_state(
        name: str, tmp_path: Path) -> None:
    data_dir = tmp_path / name
    shutil.copytree(GOLDEN_DIR / name, data_dir)
    assert describe(recover_only(data_dir)) == EXPECTED[name]


def test_the_same_mutations_write_byte_identical_wal_and_snapshot_files(tmp_path: Path) -> None:
    written = write_golden(tmp_path)
    assert written == EXPECTED
    for name in ("wal_only", "with_snapshot"):
        assert (tmp_path / name / WAL).read_bytes() == (GOLDEN_DIR / name / WAL).read_bytes()
    golden_snap = GOLDEN_DIR / "with_snapshot" / SNAPSHOT
    new_snap = tmp_path / "with_snapshot" / SNAPSHOT
    # Everything but the header's created_ms (and so its crc) is fixed.
    assert read_snapshot_header(new_snap)[:2] == read_snapshot_header(golden_snap)[:2]
    assert new_snap.read_bytes()[:8] == golden_snap.read_bytes()[:8]
    assert new_snap.read_bytes()[SNAP_HEADER_SIZE:] == golden_snap.read_bytes()[SNAP_HEADER_SIZE:]


def test_pion_server_started_on_the_golden_snapshot_and_wal_answers_from_them(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(GOLDEN_DIR / "with_snapshot", data_dir)
    server = start_server(data_dir)
    try:
        r = server.client()
        assert r.get(b"a") == b"2"
        assert r.pttl(b"ttl") == -1
        assert r.get(b"after") == b"snapshot"
        assert r.execute_command("V.LIST") == [b"e2", b"e3", b"mixed", b"p1_pk", b"p1_pv", b"plain"]
        assert r.execute_command("KV.PREFIX.LOOKUP", "p1") == b"HIT"
        info = r.execute_command("AI.SEMANTIC_CACHE", "INFO", "faq")
        assert dict(zip(info[::2], info[1::2], strict=True))[b"entries"] == 3
    finally:
        assert server.stop() == 0
