"""Golden WAL/snapshot directories written through a real server, and reading them back
record by record.

The golden sets (``tests/persist/golden_search.py``, ``golden_ssm.py``) pin the on-disk
format: each generator fills a server, kills it with -9 (no shutdown snapshot, so the
files are exactly what was logged), and records what a restarted server answers. The
tests then check that today's code loads those files to the same answers and that every
record decodes into a class that encodes the same bytes. Both halves are the same for
every family, so they live here once.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from pion.server.persist.files import DataLayout
from pion.server.persist.records import encode_fields
from pion.server.persist.recovery import recover
from pion.server.store.records import decode_record
from support.procs import start_server

Fill = Callable[[redis.Redis], None]
Answers = Callable[[redis.Redis], object]


def copy_data(src: Path, dst: Path) -> None:
    """Copy a data directory's ``pion.*`` files (logs and snapshots, nothing else)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.name.startswith("pion."):
            shutil.copy2(f, dst / f.name)


def write_golden(root: Path, fill: Fill, fill_after_snapshot: Fill, answers: Answers,
                 args: tuple[str, ...] = ()) -> dict[str, object]:
    """Write ``wal_only/`` and ``with_snapshot/`` under ``root``; return what a restarted
    server answers from each (``answers``)."""
    expected: dict[str, object] = {}
    work = root / "_work"
    for name in ("wal_only", "with_snapshot"):
        server = start_server(work / name, "--appendfsync", "always", *args)
        try:
            r = server.client()
            fill(r)
            if name == "with_snapshot":
                assert r.execute_command("SAVE") is True
                fill_after_snapshot(r)
        finally:
            server.kill9()  # no shutdown snapshot: the files are exactly what was logged
        copy_data(work / name, root / name)
        check_dir = work / f"{name}_check"
        copy_data(root / name, check_dir)
        server = start_server(check_dir, *args)
        try:
            expected[name] = answers(server.client())
        finally:
            server.stop()
    shutil.rmtree(work)
    return expected


def regenerate(golden_dir: Path, fill: Fill, fill_after_snapshot: Fill, answers: Answers,
               args: tuple[str, ...] = ()) -> None:
    """Overwrite ``golden_dir`` with fresh golden files and their ``expected.json``."""
    if golden_dir.exists():
        shutil.rmtree(golden_dir)
    golden_dir.mkdir(parents=True)
    result = write_golden(golden_dir, fill, fill_after_snapshot, answers, args)
    (golden_dir / "expected.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print("wrote", sorted(p.name for p in golden_dir.rglob("*")))


def _payload(fields: dict[str, Any]) -> bytes:
    return b"".join(bytes(part) for part in encode_fields(fields))


def logged_records(data_dir: Path) -> list[tuple[int, bytes, bytes]]:
    """(type, payload as read, payload of the decoded record class) of every record that
    recovery replays from ``data_dir`` (snapshot first, then the WAL)."""
    out: list[tuple[int, bytes, bytes]] = []

    def sink(rtype: int, fields: dict[str, Any]) -> None:
        out.append((rtype, _payload(fields), _payload(decode_record(rtype, fields).fields())))
    recover(DataLayout(data_dir, 0), sink)
    return out
