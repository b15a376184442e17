"""The mypyc build of the hot path and its pure-Python twin (issue 13, docs/compiled.md).

A tree built by ``setup.py`` holds ``.so`` extensions next to the hot modules' sources;
``PION_PURE_PYTHON=1`` makes the same tree run as plain Python, and a source edited after
the build is never shadowed by its stale extension. Both builds say which they are in
``pion-server --version`` and ``INFO server``.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import pion
from pion import _compiled
from support.procs import start_server

SRC = Path(pion.__file__).resolve().parent.parent
BUILT = all(_compiled._extension(name) is not None for name in _compiled.COMPILED_MODULES)
needs_build = pytest.mark.skipif(not BUILT or _compiled.stale_reason() is not None
                                 or _compiled.pure_python_requested(),
                                 reason="no fresh mypyc build in this tree (make compile), or this "
                                        "run asked for plain Python (PION_PURE_PYTHON=1)")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_ENV}
    return {**env, **extra}


def _version(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "pion.server", "--version"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_pure_python_env_makes_version_say_compiled_no() -> None:
    assert _version(_env(PION_PURE_PYTHON="1")) == f"pion-server {pion.__version__} (compiled: no)"


def test_pure_python_env_makes_info_server_say_compiled_no(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d", env={"PION_PURE_PYTHON": "1"})
    try:
        info = server.client().info("server")
        assert info["compiled"] == "no"
        assert "(compiled: no) ready on" in server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("value", ["", "0", "false", "no", "NO"])
def test_pure_python_env_off_values_do_not_ask_for_pure_python(value: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PION_PURE_PYTHON", value)
    assert _compiled.pure_python_requested() is False


@needs_build
def test_a_built_tree_runs_compiled_and_says_so_in_version_and_info(tmp_path: Path) -> None:
    assert _version(_env()) == f"pion-server {pion.__version__} (compiled: mypyc)"
    server = start_server(tmp_path / "d", env=_env())
    try:
        client = server.client()
        assert client.info("server")["compiled"] == "mypyc"
        assert client.set("k", b"v") is True
        assert client.get("k") == b"v"
    finally:
        server.stop()


@needs_build
def test_each_hot_module_imports_its_extension_and_pure_python_imports_its_source() -> None:
    code = ("import importlib, sys; import pion._compiled as c; "
            "print(' '.join(importlib.import_module(m).__file__.rsplit('.', 1)[-1] "
            "for m in c.COMPILED_MODULES))")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0].rsplit(".", 1)[-1]
    for env, expected in ((_env(), suffix), (_env(PION_PURE_PYTHON="1"), "py")):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, env=env, check=True)
        assert done.stdout.split() == [expected] * len(_compiled.COMPILED_MODULES)


@needs_build
def test_a_source_edited_after_the_build_makes_every_hot_module_import_from_source(
        tmp_path: Path) -> None:
    tree = tmp_path / "src"
    shutil.copytree(SRC / "pion", tree / "pion", ignore=shutil.ignore_patterns("__pycache__"))
    for group_lib in SRC.glob("*__mypyc*"):
        shutil.copy2(group_lib, tree / group_lib.name)
    edited = tree / "pion" / "server" / "dispatcher.py"
    edited.write_text(edited.read_text() + "# edited after the build\n")
    code = ("import pion._compiled as c; print(c.status()); print(c.stale_reason())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=_env(PYTHONPATH=str(tree)), check=True)
    assert done.stdout.splitlines() == [
        "no", "dispatcher.py differs from the mypyc build (run `make compile`)"]


def test_a_server_on_port_zero_reports_the_port_it_bound(tmp_path: Path) -> None:
    """``PionServer.port`` reads uvloop's ``Server.sockets``, a list where typeshed says tuple:
    the compiled build raised TypeError there at start-up (the log line reads the port)."""
    proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", "0", "--binary-port",
                             "0", "--dir", str(tmp_path / "d")], stderr=subprocess.PIPE,
                            text=True, env=_env())
    try:
        assert proc.stderr is not None
        line = ""
        for line in proc.stderr:
            if " ready on " in line:
                break
        port = int(line.split(" ready on 127.0.0.1:")[1].split()[0])
        client = redis.Redis(port=port)
        assert client.ping() is True
        client.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        proc.stderr.close()
