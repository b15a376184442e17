"""Build hook: compile pion-server's per-request path to C with mypyc (docs/compiled.md).

Everything else about the package is declared in pyproject.toml; this file only adds the
extension modules. The same sources always work as plain Python, so the compiled build is
optional and chosen here, at build time:

  * ``PION_PURE_PYTHON=1`` in the environment, no C compiler, or no mypyc -> no extensions
    (a pure-Python install; a note says why on stderr);
  * otherwise the modules in ``pion._compiled.COMPILED_MODULES`` (the network protocol,
    dispatcher, RESP encoder/framer, keyspace and V-store stores and commands, WAL record
    framing) are compiled. With ``pip install -e .`` (``make setup``) the ``.so`` files land
    next to the ``.py`` files in ``src/`` (git-ignored).

Only those hot modules are compiled, to keep ``make setup`` short (about a minute on a busy
2-core box). At run time ``PION_PURE_PYTHON=1`` also makes an already-built tree import
the ``.py`` files (``pion/_compiled.py``), which is how CI runs the tests against both builds.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "src"))
from pion._compiled import (  # noqa: E402
    COMPILED_MODULES, pure_python_requested, source_digests, write_manifest,
)

sys.path.pop(0)


def _why_not_compiled() -> str | None:
    """None when the mypyc build can run here, else the reason it does not."""
    if pure_python_requested():
        return "PION_PURE_PYTHON=1"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler!r} not on PATH)"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed (it ships with mypy)"
    return None


# The sources this build compiles, hashed before mypyc reads them (an edit made during the
# build then reads as stale); recorded once the extensions are in place.
_digests: dict[str, str] | None = None


# Only these commands build extensions. pip runs setup.py three times per install (build
# requirements, metadata, the build itself); mypycify type-checks and generates C when called,
# so the other runs skip it.
_BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _ext_modules() -> list[object]:
    global _digests
    if not _BUILD_COMMANDS.intersection(sys.argv[1:]):
        return []
    reason = _why_not_compiled()
    if reason is not None:
        print(f"pion: building pure Python ({reason})", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    _digests = source_digests()
    write_manifest({})  # while the extensions are being replaced, every source reads as stale
    # An extension left by an earlier build for a module no longer compiled would shadow its .py.
    wanted = {ROOT / "src" / (name.replace(".", "/") + ".py") for name in COMPILED_MODULES}
    for ext in (ROOT / "src" / "pion").rglob("*.so"):
        if ext.with_name(ext.name.split(".", 1)[0] + ".py") not in wanted:
            ext.unlink()
    paths = ["src/" + name.replace(".", "/") + ".py" for name in COMPILED_MODULES]
    # --ignore-missing-imports: an isolated build env has no hiredis/numpy/uvloop stubs;
    # their values are then plain objects in the compiled code (checked at run time).
    return list(mypycify(["--ignore-missing-imports", *paths], opt_level="3",
                         debug_level="0"))


class BuildExt(build_ext):
    """build_ext that records which sources the extensions were compiled from."""

    def run(self) -> None:
        super().run()
        if _digests is not None:
            write_manifest(_digests)


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": BuildExt})
