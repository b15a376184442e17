"""One option loader for every Pion program: CLI flag > ``PION_*`` environment > default.

Each program declares its options once as ``Option`` rows (flags, config field, a parser that
turns text into the value, help) and calls ``load_options``. The environment variable is derived
from the field: ``Option.env_prefix + field.upper()`` (pion-server ``PION_MAXMEMORY``, pion-llm
``PION_LLM_PION_PORT``, pion-serve ``PION_SERVE_CACHE_THRESHOLD``). Flags and environment values
go through the same parser, so a bad value reads the same either way and raises ``ConfigError``
naming the key (``--port`` or ``PION_LLM_PORT``) and the value; each program's ``main`` prints it
and exits 2 without a traceback (``exit_on_config_error``).

Example::

    OPTIONS = [Option(("--port",), "port", parse_int(0, 65535), "TCP port", env_prefix="PION_X_")]
    values = load_options("pion-x", "what it is", OPTIONS, ["--port", "8000"])   # {"port": 8000}
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pion.common.errors import ConfigError
from pion.common.sizes import parse_size

Parser = Callable[[str, str], Any]  # (key for the error message, text) -> value

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class Option:
    """One configuration option.

    Attributes:
        flags: command-line spellings (empty for an environment-only option).
        field: the config dataclass field it sets; also names the environment variable.
        parse: ``(key, text) -> value``; raises ``ConfigError`` naming ``key`` and ``text``.
        help: one line for ``--help``.
        switch: for a flag that takes no value, the text it stands for (``"yes"``, or ``"no"``
            for a ``--no-x`` flag that turns a field off); None for a flag with a value.
        env_prefix: the program's prefix (``PION_``, ``PION_LLM_``, ``PION_SERVE_``).
        repeat: the flag may be given several times (``--tenant a:.. --tenant b:..``); the
            values reach ``parse`` joined by single spaces, as the environment form spells them.
    """

    flags: tuple[str, ...]
    field: str
    parse: Parser
    help: str
    switch: str | None = None
    env_prefix: str = "PION_"
    repeat: bool = False

    @property
    def env_name(self) -> str:
        return self.env_prefix + self.field.upper()


def build_arg_parser(prog: str, description: str, options: Sequence[Option], version: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser whose values stay text (None when absent) until ``load_options`` parses them."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for opt in options:
        if not opt.flags:
            continue
        # argparse %-formats help texts (for %(default)s): a literal '%' (e.g. "crc32(name) % N")
        # must be doubled, or --help crashes
        text = opt.help.replace("%", "%%")
        env_help = f" [env {opt.env_name}]"
        if opt.switch is not None:
            parser.add_argument(*opt.flags, dest=opt.field, action="store_const", const=opt.switch,
                                default=None, help=text + env_help)
        elif opt.repeat:
            parser.add_argument(*opt.flags, dest=opt.field, default=None, metavar="VALUE",
                                action="append", help=text + " (repeatable)" + env_help)
        else:
            parser.add_argument(*opt.flags, dest=opt.field, default=None, metavar="VALUE",
                                help=text + env_help)
    if version is not None:
        parser.add_argument("--version", action="version", version=f"{prog} {version}")
    return parser


def load_options(prog: str, description: str, options: Sequence[Option], argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
                 version: str | None = None) -> dict[str, Any]:
    """Parsed values of the options that were given (flag wins over environment); raises ConfigError.

    Options given neither way are absent, so the config dataclass supplies its own default.
    """
    environ = os.environ if env is None else env
    parser = build_arg_parser(prog, description, options, version)
    args = parser.parse_args(list(argv) if argv is not None else None)
    values: dict[str, Any] = {}
    for opt in options:
        raw: str | list[str] | None = getattr(args, opt.field, None)
        if isinstance(raw, list):
            raw = " ".join(raw)
        key = opt.flags[-1] if opt.flags else ""
        if raw is None and opt.env_name in environ:
            raw, key = environ[opt.env_name], opt.env_name
        if raw is not None:
            values[opt.field] = opt.parse(key, raw)
    return values


def exit_on_config_error(prog: str, exc: ConfigError) -> int:
    """Print ``prog: <message>`` on stderr (no traceback) and return the exit code 2."""
    print(f"{prog}: {exc}", file=sys.stderr)
    return 2


def exit_on_missing_extra(prog: str, extra: str, exc: ModuleNotFoundError) -> int:
    """Name the pip extra a program needs when one of its imports is missing; returns exit code 1."""
    print(f"{prog}: needs the [{extra}] extra (pip install 'pion[{extra}]'): {exc}", file=sys.stderr)
    return 1


# ---- parsers: (key, text) -> value ------------------------------------------------------------

def parse_int(lo: int | None = None, hi: int | None = None) -> Callable[[str, str], int]:
    """An integer in ``lo..hi`` (either bound optional)."""
    def parse(key: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bound = f"{lo}..{hi}" if lo is not None and hi is not None else (
                f">= {lo}" if lo is not None else f"<= {hi}")
            raise ConfigError(f"{key}: must be {bound}, got {value}")
        return value
    return parse


def parse_float(lo: float | None = None, hi: float | None = None) -> Callable[[str, str], float]:
    """A finite number in ``lo..hi`` (either bound optional)."""
    def parse(key: str, text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise ConfigError(f"{key}: must be a finite number, got {text!r}")
        if lo is not None and value < lo:
            raise ConfigError(f"{key}: must be >= {lo:g}, got {text!r}")
        if hi is not None and value > hi:
            raise ConfigError(f"{key}: must be <= {hi:g}, got {text!r}")
        return value
    return parse


def parse_bool(key: str, text: str) -> bool:
    """1/0, true/false, yes/no, on/off (any case)."""
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise ConfigError(f"{key}: expected a boolean (yes/no, 1/0, true/false, on/off), got {text!r}")


def parse_choice(*choices: str) -> Callable[[str, str], str]:
    """One of ``choices`` (case-insensitive; returned lower-case)."""
    def parse(key: str, text: str) -> str:
        if text.lower() not in choices:
            raise ConfigError(f"{key}: must be one of {', '.join(choices)}, got {text!r}")
        return text.lower()
    return parse


def parse_text(key: str, text: str) -> str:
    return text


def parse_optional_text(key: str, text: str) -> str | None:
    """Text, where an empty value means "not set" (a password, a URL)."""
    return text or None


def parse_path(key: str, text: str) -> Path:
    if not text:
        raise ConfigError(f"{key}: must not be empty")
    return Path(text)


def parse_byte_size(key: str, text: str) -> int:
    """``8gb``, ``512mb``, ``64KiB``, ``0`` (see ``pion.common.sizes``)."""
    return parse_size(text, key)


def parse_positive_size(key: str, text: str) -> int:
    value = parse_size(text, key)
    if value <= 0:
        raise ConfigError(f"{key}: must be > 0, got {text!r}")
    return value
