"""SSM.PREFIX.* state in WAL and snapshot files written by main's code before the typed
record layer (``golden_ssm.py``, commit 1d49644) loads to the same answers, and today's
record classes (SsmStore, SsmDrop, SsmEvict, SsmFlush) write the same bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from persist.golden_ssm import ARGS, GOLDEN_DIR, answers, fill
from pion.server.persist.files import DataLayout
from pion.server.persist.records import RecordType, encode_fields
from pion.server.persist.recovery import recover
from pion.server.store.records import decode_record
from support.procs import start_server

EXPECTED = json.loads((GOLDEN_DIR / "expected.json").read_text())
SSM_TYPES = {RecordType.SSM_PREFIX_STORE, RecordType.SSM_PREFIX_DROP, RecordType.SSM_PREFIX_EVICT,
             RecordType.SSM_PREFIX_FLUSH}


def _payload(fields: dict[str, Any]) -> bytes:
    return b"".join(bytes(part) for part in encode_fields(fields))


def _records(data_dir: Path) -> list[tuple[int, bytes, bytes]]:
    """(type, payload as read, payload of the decoded record class) of every record."""
    out: list[tuple[int, bytes, bytes]] = []

    def sink(rtype: int, fields: dict[str, Any]) -> None:
        out.append((rtype, _payload(fields), _payload(decode_record(rtype, fields).fields())))
    recover(DataLayout(data_dir, 0), sink)
    return out


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
    records = _records(GOLDEN_DIR / name)
    assert [(t, read) for t, read, _ in records] == [(t, again) for t, _, again in records]
    types = {t for t, _, _ in records}
    assert (SSM_TYPES if name == "wal_only" else {RecordType.SSM_PREFIX_STORE}) <= types


def test_the_same_commands_log_byte_identical_records_to_main(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always", *ARGS)
    try:
        fill(server.client())
    finally:
        server.kill9()
    assert [(t, p) for t, p, _ in _records(tmp_path / "data")] == \
        [(t, p) for t, p, _ in _records(GOLDEN_DIR / "wal_only")]
    assert (tmp_path / "data" / "pion.vstore.0.wal").read_bytes() == \
        (GOLDEN_DIR / "wal_only" / "pion.vstore.0.wal").read_bytes()
