"""Fixtures of the proxy tests; the process helpers live in ``support.proxy_procs``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.fake_backends import FakeBackend, running

@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeBackend]:
    yield from running("openai")
