"""Fixtures shared by the persistence tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs when there is one: the cut-at-every-byte tests run hundreds of
    recoveries, each fsyncing a cut file, which a disk makes minutes long."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="pion-persist-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
