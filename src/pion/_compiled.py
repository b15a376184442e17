"""Which build of the server's hot path runs: mypyc-compiled extensions or the ``.py`` files.

``setup.py`` compiles ``COMPILED_MODULES`` with mypyc when it can; an editable install
leaves each ``<module>.cpython-*.so`` next to its ``.py`` in ``src/`` and Python's import
system prefers the extension. Two cases must still import the ``.py`` files:

  * ``PION_PURE_PYTHON=1`` at run time — to run the same tree as plain Python (CI runs the
    server tests against both builds; the benchmark runs both side by side);
  * stale extensions — a ``.py`` that differs from what the last build compiled
    (``MANIFEST``). Compiled modules of one
    build call each other directly in C, so one stale module makes the whole set untrustworthy:
    all of them are then imported from source, and ``stale_reason()`` says why (pion-server
    logs it at start-up; ``make compile`` rebuilds).

``install()`` (called by ``pion/__init__.py``, before any server module is imported) puts
a finder in front of ``sys.meta_path`` that resolves only these module names to their
``.py`` files; nothing else about importing changes, and with fresh extensions and no
``PION_PURE_PYTHON`` it installs nothing.

This module must stay importable by ``setup.py`` without the package's dependencies.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

# The per-request path (issue 13): network protocol, dispatcher, RESP encoder and framer,
# keyspace and V-store commands and stores, the typed records and WAL framing they log,
# and the command context every handler reads (``ctx.client``, ``ctx.server.stores``).
COMPILED_MODULES: tuple[str, ...] = (
    "pion.server.context",
    "pion.server.net",
    "pion.server.dispatcher",
    "pion.server.resp.encoder",
    "pion.server.resp.framing",
    "pion.server.resp.inline",
    "pion.server.commands.admin",
    "pion.server.commands.keyspace",
    "pion.server.commands.vstore",
    "pion.server.store.batch_clock",
    "pion.server.store.keyspace",
    "pion.server.store.vstore",
    "pion.server.persist.records",
    "pion.server.persist.wal",
    "pion.server.persist.binding",
)

PURE_ENV = "PION_PURE_PYTHON"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the directory holding pion/
# What the last in-place build compiled (module and sha256 of its source, one per line).
MANIFEST = _PACKAGE_ROOT / "pion" / "_compiled_sources.txt"
_stale: str | None = None


def pure_python_requested() -> bool:
    """True when ``PION_PURE_PYTHON`` is set to anything but empty/0/false/no."""
    return os.environ.get(PURE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _source(name: str) -> Path:
    return _PACKAGE_ROOT.joinpath(*name.split(".")).with_suffix(".py")


def _extension(name: str) -> Path | None:
    """The built extension next to ``name``'s source, if there is one."""
    source = _source(name)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.is_file():
            return candidate
    return None


def source_digests() -> dict[str, str]:
    """sha256 of each compiled module's source, as the build records it (``MANIFEST``)."""
    return {name: hashlib.sha256(_source(name).read_bytes()).hexdigest()
            for name in COMPILED_MODULES}


def write_manifest(digests: dict[str, str]) -> None:
    """Record which sources a build compiles (``setup.py``, before mypyc reads them)."""
    MANIFEST.write_text("".join(f"{name} {digest}\n" for name, digest in digests.items()))


def _find_stale() -> str | None:
    """Why the built extensions must not be used (a source that differs from the one the
    build compiled), or None (fresh, or nothing built).

    Content, not mtimes: a build that changed nothing does not rewrite its extensions, and a
    git checkout touches files it does not change. Without a manifest (an installed wheel,
    whose sources nobody edits) the extensions are trusted.
    """
    if not MANIFEST.is_file() or all(_extension(n) is None for n in COMPILED_MODULES):
        return None
    built = dict(line.split(" ", 1) for line in MANIFEST.read_text().splitlines() if line)
    for name, digest in source_digests().items():
        if built.get(name) != digest:
            return f"{_source(name).name} differs from the mypyc build (run `make compile`)"
    return None


class _SourceFinder:
    """Resolves ``COMPILED_MODULES`` to their ``.py`` files (a ``sys.meta_path`` finder)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in COMPILED_MODULES:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path or ():
            candidate = os.path.join(entry, leaf)
            if os.path.isfile(candidate):
                return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def install() -> None:
    """Import the hot modules from source when asked to, or when their build is stale."""
    global _stale
    pure = pure_python_requested()
    if not pure:
        _stale = _find_stale()
    if (pure or _stale is not None) and not any(
            isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def stale_reason() -> str | None:
    """Why built extensions were ignored although ``PION_PURE_PYTHON`` is unset, or None."""
    return _stale


def status() -> str:
    """``mypyc`` when the server's hot path runs compiled in this process, else ``no``."""
    import pion.server.net as net

    return "mypyc" if not (net.__file__ or "").endswith(".py") else "no"
