"""The one command table: every family module's ``COMMANDS`` joined, duplicates rejected.

Family modules are listed in ``FAMILY_MODULES`` in the order their hooks run (``setup``
in list order, ``shutdown`` in reverse, INFO sections in list order). Modules in
``NOT_YET_WRITTEN`` belong to families being built in parallel; while such a module does
not exist it is skipped with a debug log. Once every family has landed that set is empty
and this is a plain import list.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from pion.server.commands.spec import CommandSpec
from pion.server.context import ServerState

log = logging.getLogger("pion.server.commands")

FAMILY_MODULES: tuple[str, ...] = (
    "pion.server.commands.admin",
    "pion.server.commands.keyspace",
    "pion.server.commands.hashes",
    "pion.server.commands.stats",
    "pion.server.commands.vstore",
    "pion.server.commands.kvprefix",
    "pion.server.commands.semantic",
    "pion.server.commands.slowlog",
    "pion.server.commands.search",  # after keyspace: its SearchStore watches the hashes
    "pion.server.commands.ssm",  # after kvprefix: its setup joins the V-store's budget and eviction
    "pion.server.commands.attend",
    # Last: its setup() recovers the stores created above before clients are accepted.
    "pion.server.commands.persist",
)

# Families still being written in parallel (skipped while their module is missing).
# Every family has landed, so this is empty and the list above is a plain import list.
NOT_YET_WRITTEN: frozenset[str] = frozenset()

InfoSections = dict[str, list[tuple[str, object]]]


class CommandTable:
    """The loaded families and their joined command specs (by upper-case name)."""

    def __init__(self, families: list[ModuleType]) -> None:
        self.families = families
        self.specs: dict[str, CommandSpec] = {}
        for module in families:
            for spec in module.COMMANDS:
                name = spec.name.upper()
                if name in self.specs:
                    raise ValueError(f"command {name} declared twice "
                                     f"(second time in {module.__name__})")
                self.specs[name] = spec

    def hooks(self, hook: str, reverse: bool = False) -> Iterator[tuple[str, Any]]:
        """(module name, function) for each family that defines ``hook``."""
        modules = reversed(self.families) if reverse else self.families
        for module in modules:
            fn = getattr(module, hook, None)
            if fn is not None:
                yield module.__name__, fn

    def setup(self, state: ServerState) -> None:
        """Call every family's ``setup(state)`` once, inside the running event loop."""
        for name, fn in self.hooks("setup"):
            log.debug("setup %s", name)
            fn(state)

    async def shutdown(self, state: ServerState) -> None:
        """Call every family's ``shutdown(state)`` (sync or async), last family first.

        One family's failure is logged and does not stop the others from flushing.
        """
        for name, fn in self.hooks("shutdown", reverse=True):
            try:
                result = fn(state)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("shutdown hook of %s failed", name)

    def flushall(self, state: ServerState) -> None:
        """FLUSHALL: every family that holds data empties it."""
        for _, fn in self.hooks("flushall"):
            fn(state)

    def info(self, state: ServerState) -> InfoSections:
        """INFO sections from every family's ``info(state)``, merged in family order."""
        sections: InfoSections = {}
        for _, fn in self.hooks("info"):
            for section, fields in fn(state).items():
                sections.setdefault(section, []).extend(fields)
        return sections


def load_families(names: tuple[str, ...] = FAMILY_MODULES) -> list[ModuleType]:
    """Import the family modules; a module of a family not yet written is skipped."""
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name == name and name in NOT_YET_WRITTEN:
                log.debug("command family %s not written yet; skipped", name)
                continue
            raise
    return modules


def build_table(names: tuple[str, ...] = FAMILY_MODULES) -> CommandTable:
    """Load the families and join their commands."""
    return CommandTable(load_families(names))
