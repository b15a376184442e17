"""RedisVL (the Redis vector library LangChain's Redis store is built on) works unmodified
against pion-server: the same script prints the same lines against pion-server and against
real RediSearch. RedisVL lives in the throw-away oracle venv, never in the project."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.procs import ServerProcess
from support.redisearch import RediSearchProcess, needs_hnswlib, redisearch_paths, venv_with

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "redisvl_check.py"
EXPECTED = [
    "loaded 3 exists True",
    "[('red apple', 0.0061), ('green pear', 0.8896)]",
    "['green pear', 'oak tree']",
    "['red apple', 'green pear']",
    "3",
    "listed after delete: []",
]


def _run(python: Path, port: int) -> list[str]:
    out = subprocess.run([str(python), str(SCRIPT), str(port)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


@needs_hnswlib  # the script's schema asks for HNSW
def test_redisvl_creates_loads_queries_and_drops_like_on_redisearch(shared_pion_server: ServerProcess) -> None:
    python = venv_with("redisvl")
    if python is None:
        pytest.skip("redisvl could not be installed into the throw-away venv")
    assert _run(python, shared_pion_server.port) == EXPECTED
    paths = redisearch_paths()
    assert paths is not None  # venv_with built it
    oracle = RediSearchProcess(*paths)
    try:
        assert _run(python, oracle.port) == EXPECTED
    finally:
        oracle.stop()
