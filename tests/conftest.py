"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.procs import ServerProcess, start_server

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def pion_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh pion-server on a free port with its own data directory."""
    server = start_server(tmp_path / "pion-data")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def shared_pion_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One pion-server for a whole test module (tests must use distinct keys)."""
    server = start_server(tmp_path_factory.mktemp("pion-data"))
    try:
        yield server
    finally:
        server.stop()
