"""Debian's ``redis-server`` as an oracle: the same commands go to pion-server and to Redis, and
the replies (errors included, by their text) must be identical.

``redis_oracle_port`` is a module-scoped fixture (skips when ``redis-server`` is not
installed: ``apt-get install -y redis-server``); ``Pair`` runs one command on both servers.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from support.procs import free_port


def reply_of(conn: redis.Redis, *command: Any) -> Any:
    """The reply, or ``("error", text)`` for an error reply (compared like any value)."""
    try:
        return conn.execute_command(*command)
    except redis.ResponseError as exc:
        return ("error", str(exc))


@pytest.fixture(scope="module")
def redis_oracle_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    data_dir = tmp_path_factory.mktemp("redis-oracle")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(data_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                with redis.Redis(host="127.0.0.1", port=port) as conn:
                    conn.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class Pair:
    """One connection to pion-server and one to Redis, each on a freshly flushed server."""

    pion: redis.Redis
    redis: redis.Redis

    def same(self, *command: Any) -> Any:
        """Run ``command`` on both; assert the replies are equal; return pion's."""
        ours, theirs = reply_of(self.pion, *command), reply_of(self.redis, *command)
        assert ours == theirs, f"{command!r}: pion {ours!r} != redis {theirs!r}"
        return ours

    def run(self, script: list[tuple[Any, ...]]) -> list[Any]:
        return [self.same(*command) for command in script]


def make_pair(pion_port: int, redis_port: int) -> Iterator[Pair]:
    """A Pair on two flushed servers (use from a fixture: ``yield from make_pair(...)``)."""
    with redis.Redis(host="127.0.0.1", port=pion_port) as ours, \
            redis.Redis(host="127.0.0.1", port=redis_port) as theirs:
        ours.flushall()
        theirs.flushall()
        yield Pair(ours, theirs)
