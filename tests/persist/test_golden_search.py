"""Hashes and FT indexes in WAL and snapshot files written by main's code before the typed
record layer (``golden_search.py``, commit c804919) load to the same answers, and today's
record classes (KeyHSet, KeyHDel, FtCreate, FtDropIndex, FtGraph) write the same bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from persist.golden_search import GOLDEN_DIR, answers, fill
from pion.server.persist.records import RecordType
from support.golden_files import logged_records
from support.procs import start_server
from support.redisearch import needs_hnswlib

pytestmark = needs_hnswlib  # the "docs" index is HNSW (its graph is in the snapshot)

EXPECTED = json.loads((GOLDEN_DIR / "expected.json").read_text())


@pytest.mark.parametrize("name", ["wal_only", "with_snapshot"])
def test_golden_hash_and_index_files_from_main_answer_the_same_after_a_restart(
        name: str, tmp_path: Path) -> None:
    data_dir = tmp_path / name
    shutil.copytree(GOLDEN_DIR / name, data_dir)
    server = start_server(data_dir)
    try:
        assert json.loads(json.dumps(answers(server.client()))) == EXPECTED[name]
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("name", ["wal_only", "with_snapshot"])
def test_every_golden_record_decodes_into_a_class_that_encodes_the_same_bytes(name: str) -> None:
    records = logged_records(GOLDEN_DIR / name)
    assert [(t, read) for t, read, _ in records] == [(t, again) for t, _, again in records]
    types = {t for t, _, _ in records}
    wanted = {RecordType.HSET, RecordType.FT_CREATE}
    wanted |= {RecordType.FT_GRAPH} if name == "with_snapshot" else {RecordType.HDEL, RecordType.FT_DROPINDEX}
    assert wanted <= types


def test_the_same_commands_log_the_same_records_as_main_did(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        fill(server.client())
    finally:
        server.kill9()

    def masked(data_dir: Path) -> list[tuple[int, bytes]]:
        out = []
        for rtype, payload, _ in logged_records(data_dir):
            if rtype == RecordType.EXPIRE:  # EXPIRE's deadline is now + TTL
                payload = b"EXPIRE"
            out.append((rtype, payload))
        return out
    assert masked(tmp_path / "data") == masked(GOLDEN_DIR / "wal_only")
