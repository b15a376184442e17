"""LMCache 0.5.6's own engine on CPU storing into and retrieving from pion-server through the plugin.

Each engine runs in a subprocess of the lmcache venv with a timeout (lmcache_worker.py says why);
skipped where no such venv is configured (support/engine_venvs.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pion.client.connection import PionClient
from support.engine_venvs import require_engine, run_worker
from support.procs import ServerProcess

# lmcache_worker.py's geometry: 4 layers x 2 KV heads x 64, fp16, chunks of 256 tokens.
ROW_BYTES_FP16 = 2 * 64 * 2


@pytest.fixture(scope="module")
def lmcache_python() -> Path:
    return require_engine("PION_LMCACHE_PYTHON", "lmcache")


def pion_url(server: ServerProcess) -> str:
    return f"pion://127.0.0.1:{server.port}"


def test_a_fresh_engine_retrieves_what_another_stored_bit_exact(lmcache_python: Path, pion_server: ServerProcess) -> None:
    stored = run_worker(lmcache_python, "lmcache_worker.py", "store", "--url", pion_url(pion_server), "--tokens", "512")
    retrieved = run_worker(lmcache_python, "lmcache_worker.py", "retrieve", "--url", pion_url(pion_server),
                           "--tokens", "512")
    with PionClient("127.0.0.1", pion_server.port) as client:
        info = client.kv_prefix_info()
        stats = client.pion_stats()
    assert stored["lookup_tokens"] == 512
    assert (retrieved["lookup_tokens"], retrieved["retrieved_tokens"], retrieved["bit_exact"]) == (512, 512, True)
    assert info["registered_prefixes"] == 2
    assert info["vstore_bytes"] == 2 * 4 * 512 * ROW_BYTES_FP16  # K and V, 4 layers, fp16 rows as sent
    assert stats["kvprefix_hits"] >= 2


def test_a_request_sharing_only_the_first_chunk_loads_only_that_chunk(lmcache_python: Path,
                                                                     pion_server: ServerProcess) -> None:
    run_worker(lmcache_python, "lmcache_worker.py", "store", "--url", pion_url(pion_server), "--tokens", "512")
    partial = run_worker(lmcache_python, "lmcache_worker.py", "retrieve", "--url", pion_url(pion_server),
                         "--tokens", "512", "--shared", "300")
    assert (partial["lookup_tokens"], partial["retrieved_tokens"], partial["bit_exact"]) == (256, 256, True)


def test_int8_storage_is_lossy_but_close_and_smaller(lmcache_python: Path, pion_server: ServerProcess) -> None:
    url = pion_url(pion_server)
    run_worker(lmcache_python, "lmcache_worker.py", "store", "--url", url, "--tokens", "256", "--vquant", "int8")
    retrieved = run_worker(lmcache_python, "lmcache_worker.py", "retrieve", "--url", url, "--tokens", "256",
                           "--vquant", "int8")
    with PionClient("127.0.0.1", pion_server.port) as client:
        vstore_bytes = int(client.kv_prefix_info()["vstore_bytes"])
    assert (retrieved["retrieved_tokens"], retrieved["bit_exact"]) == (256, False)
    assert retrieved["max_abs_err"] < 0.1
    assert vstore_bytes < 2 * 4 * 256 * ROW_BYTES_FP16 * 0.6
