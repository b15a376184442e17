"""The codec tests' one connection to the session's shared pion-server (through-server tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from support.procs import ServerProcess


@pytest.fixture(scope="module")
def conn(shared_pion_server: ServerProcess) -> Iterator[redis.Redis]:
    with shared_pion_server.client() as client:
        yield client
