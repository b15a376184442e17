"""The one command table: every family module's ``COMMANDS`` joined, duplicates rejected.

Family modules are listed in ``FAMILY_MODULES``; INFO sections are merged in this
order. A family module exposes ``COMMANDS`` and, optionally, ``info(state)`` (see
``spec.py``); the parts a family's handlers use are attributes of ``ServerState``
(``context.py``), built once by ``state.build_state`` — a family creates nothing itself.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType

from pion.server.commands.access import ACCESS
from pion.server.commands.spec import CommandSpec
from pion.server.context import ServerState

FAMILY_MODULES: tuple[str, ...] = (
    "pion.server.commands.admin",
    "pion.server.commands.keyspace",
    "pion.server.commands.hashes",
    "pion.server.commands.strings",
    "pion.server.commands.databases",
    "pion.server.commands.stats",
    "pion.server.commands.vstore",
    "pion.server.commands.kvprefix",
    "pion.server.commands.semantic",
    "pion.server.commands.slowlog",
    "pion.server.commands.search",
    "pion.server.commands.ssm",
    "pion.server.commands.attend",
    "pion.server.commands.persist",
    "pion.server.commands.acl",
    "pion.server.commands.workers",
    "pion.server.commands.metrics",
)

InfoSections = dict[str, list[tuple[str, object]]]
InfoHook = Callable[[ServerState], InfoSections]


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
                access = spec.access or ACCESS.get(name)
                if access is None:  # every command says which arguments are tenant data
                    raise ValueError(f"command {name} has no access spec: declare CommandSpec(access=...) "
                                     "(see commands/access.py)")
                self.specs[name] = dataclasses.replace(spec, access=access)

    def _info_hooks(self) -> Iterator[InfoHook]:
        for module in self.families:
            fn: InfoHook | None = getattr(module, "info", None)
            if fn is not None:
                yield fn

    def info(self, state: ServerState) -> InfoSections:
        """INFO sections from every family's ``info(state)``, merged in family order."""
        sections: InfoSections = {}
        for fn in self._info_hooks():
            for section, fields in fn(state).items():
                sections.setdefault(section, []).extend(fields)
        return sections


def build_table(names: tuple[str, ...] = FAMILY_MODULES) -> CommandTable:
    """Import the family modules and join their commands."""
    return CommandTable([importlib.import_module(name) for name in names])
