"""SSM.PREFIX.* state in WAL and snapshot files written by main's code before the typed
record layer (``golden_ssm.py``, commit 1d49644) loads to the same answers, and today's
record classes (SsmStore, SsmDrop, SsmEvict, SsmFlush) write the same bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from persist.golden_ssm import ARGS, GOLDEN_DIR, answers, fill
from pion.server.persist.records import RecordType
from support.golden_files import logged_records
from support.procs import start_server

EXPECTED = json.loads((GOLDEN_DIR / "expected.json").read_text())
SSM_TYPES = {RecordType.SSM_PREFIX_STORE, RecordType.SSM_PREFIX_DROP, RecordType.SSM_PREFIX_EVICT,
             RecordType.SSM_PREFIX_FLUSH}


@pytest.mark.parametrize("name", ["wal_only", "with_snapshot"])
def test_golden_ssm_files_from_main_answer_the_same_after_a_restart(name: str, tmp_path: Path) -> None:
    data_dir = tmp_path / name
    shutil.copytree(GOLDEN_DIR / name, data_dir)
    server = start_server(data_dir, *ARGS)
    try:
        assert json.loads(json.dumps(answers(server.client()))) == EXPECTED[name]
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("name", ["wal_only", "with_snapshot"])
def test_every_golden_ssm_record_decodes_into_a_class_that_encodes_the_same_bytes(name: str) -> None:
    records = logged_records(GOLDEN_DIR / name)
    assert [(t, read) for t, read, _ in records] == [(t, again) for t, _, again in records]
    types = {t for t, _, _ in records}
    assert (SSM_TYPES if name == "wal_only" else {RecordType.SSM_PREFIX_STORE}) <= types


def test_the_same_commands_log_byte_identical_records_to_main(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always", *ARGS)
    try:
        fill(server.client())
    finally:
        server.kill9()
    assert [(t, p) for t, p, _ in logged_records(tmp_path / "data")] == \
        [(t, p) for t, p, _ in logged_records(GOLDEN_DIR / "wal_only")]
    assert (tmp_path / "data" / "pion.vstore.0.wal").read_bytes() == \
        (GOLDEN_DIR / "wal_only" / "pion.vstore.0.wal").read_bytes()
