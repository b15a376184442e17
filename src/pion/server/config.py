"""pion-server configuration: one frozen dataclass built once from CLI flags and ``PION_*`` env.

Precedence: a flag on the command line wins over the environment, which wins over the
default. Every option is declared once in ``OPTIONS`` (flag, dataclass field, parser,
help); the environment name is derived from the field (``max_sessions`` ->
``PION_MAX_SESSIONS``). To add an option (the persistence family adds ``--appendfsync``,
``--wal-max-bytes``, ``--wal-repair``), add a field to ``ServerConfig`` and one
``Option`` row — nothing else reads argv or the environment.

Errors name the key and the bad value (``ConfigError``); ``main`` prints them and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pion.common.errors import ConfigError
from pion.common.sizes import parse_size

DEFAULT_PORT = 1974
LOG_LEVELS = ("debug", "verbose", "info", "notice", "warning", "error")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The effective configuration of one pion-server worker (immutable after start-up)."""

    port: int = DEFAULT_PORT
    bind: str = "127.0.0.1"
    kvcache: bool = True  # accepted for compatibility: the KV families are always on
    workers: int = 1
    data_dir: Path = Path("./pion-data")
    requirepass: str | None = None
    max_sessions: int = 256
    maxmemory: int = 0  # bytes, V-store + keyspace; 0 = unlimited
    prefill_us_per_token: float = 555.0
    loglevel: str = "notice"
    maxclients: int = 10000
    proto_max_bulk_len: int = 512 * 1024**2
    client_query_buffer_limit: int = 1024**3  # bytes of one request still being received
    client_output_buffer_limit: int = 1024**3  # bytes queued for a client that is not reading
    slowlog_log_slower_than_us: int = 10_000  # -1 disables SLOWLOG, 0 records every command
    slowlog_max_len: int = 128  # SLOWLOG ring size (oldest entries drop off)
    embed_threads: int = 1  # torch threads of the AI.* embedder; 0 = torch's default (docs/benchmarks.md)
    hz: int = 10  # active-expiry cycles per second
    appendfsync: str = "everysec"  # WAL fsync policy: always | everysec | no (Redis semantics)
    wal_max_bytes: int = 1024**3  # a background snapshot starts when the WAL passes this
    wal_repair: bool = False  # cut a damaged WAL at the damage instead of refusing to start

    def summary(self) -> str:
        """One line with every field, for the start-up log (the password is masked)."""
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "requirepass" and value:
                value = "***"
            parts.append(f"{f.name}={value}")
        return " ".join(parts)


def _int(lo: int, hi: int | None = None) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise ConfigError(f"{key}: must be {bound}, got {value}")
        return value
    return parse


def _float_nonneg(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{key}: expected a number, got {text!r}") from None
    if not value >= 0.0 or value == float("inf"):
        raise ConfigError(f"{key}: must be a finite number >= 0, got {text!r}")
    return value


def _size(key: str, text: str) -> int:
    return parse_size(text, key)


def _positive_size(key: str, text: str) -> int:
    value = parse_size(text, key)
    if value <= 0:
        raise ConfigError(f"{key}: must be > 0, got {text!r}")
    return value


def _text(key: str, text: str) -> str:
    return text


def _password(key: str, text: str) -> str | None:
    return text or None


def _path(key: str, text: str) -> Path:
    if not text:
        raise ConfigError(f"{key}: must not be empty")
    return Path(text)


def _loglevel(key: str, text: str) -> str:
    if text.lower() not in LOG_LEVELS:
        raise ConfigError(f"{key}: must be one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.lower()


def _bool(key: str, text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{key}: expected yes/no, got {text!r}")


def _appendfsync(key: str, text: str) -> str:
    if text.lower() not in ("always", "everysec", "no"):
        raise ConfigError(f"{key}: must be one of always, everysec, no, got {text!r}")
    return text.lower()


def _workers(key: str, text: str) -> int:
    value = _int(1)(key, text)
    if value != 1:
        raise ConfigError(f"{key}: only 1 worker is supported in this build (got {value}); "
                          "multi-worker mode arrives with the multi-worker issue — run with -w 1")
    return value


@dataclass(frozen=True, slots=True)
class Option:
    """One configuration option: its flags, the ServerConfig field it sets, and its parser."""

    flags: tuple[str, ...]
    field: str
    parse: Callable[[str, str], Any]
    help: str
    is_switch: bool = False  # a flag without a value (sets True)

    @property
    def env_name(self) -> str:
        return "PION_" + self.field.upper()


OPTIONS: list[Option] = [
    Option(("--port",), "port", _int(0, 65535), f"TCP port (default {DEFAULT_PORT})"),
    Option(("--bind",), "bind", _text, "address to listen on (default 127.0.0.1)"),
    Option(("--kvcache",), "kvcache", _bool, "accepted for compatibility; KV families are always on",
           is_switch=True),
    Option(("-w", "--workers"), "workers", _workers, "worker processes (only 1 in this build)"),
    Option(("--dir",), "data_dir", _path, "data directory (default ./pion-data)"),
    Option(("--requirepass",), "requirepass", _password, "password clients must AUTH with"),
    Option(("--max-sessions",), "max_sessions", _int(1), "V-store session limit (default 256)"),
    Option(("--maxmemory",), "maxmemory", _size, "V-store + keyspace byte budget, e.g. 8gb (0 = unlimited)"),
    Option(("--prefill-us-per-token",), "prefill_us_per_token", _float_nonneg,
           "estimated prefill cost per token for the receipt (default 555)"),
    Option(("--loglevel",), "loglevel", _loglevel, "debug|verbose|info|notice|warning|error"),
    Option(("--maxclients",), "maxclients", _int(1), "maximum simultaneous clients (default 10000)"),
    Option(("--proto-max-bulk-len",), "proto_max_bulk_len", _positive_size,
           "largest bulk string a request may carry (default 512mb)"),
    Option(("--client-query-buffer-limit",), "client_query_buffer_limit", _positive_size,
           "largest single request still being received (default 1gb)"),
    Option(("--client-output-buffer-limit",), "client_output_buffer_limit", _size,
           "disconnect a client whose unsent replies exceed this (default 1gb; 0 = no limit)"),
    Option(("--slowlog-log-slower-than",), "slowlog_log_slower_than_us", _int(-1),
           "keep commands slower than this many microseconds in SLOWLOG (default 10000; -1 = off, 0 = all)"),
    Option(("--slowlog-max-len",), "slowlog_max_len", _int(0),
           "SLOWLOG ring size: entries kept, oldest dropped first (default 128)"),
    Option(("--embed-threads",), "embed_threads", _int(0),
           "torch CPU threads of the AI.* embedding model (default 1; 0 = torch's default, one per core)"),
    Option(("--hz",), "hz", _int(1, 500), "active-expiry cycles per second (default 10)"),
    Option(("--appendfsync",), "appendfsync", _appendfsync,
           "WAL fsync policy: always (reply after fsync) | everysec (default) | no"),
    Option(("--wal-max-bytes",), "wal_max_bytes", _positive_size,
           "start a background snapshot when the WAL passes this size (default 1gb)"),
    Option(("--wal-repair",), "wal_repair", _bool,
           "at start-up, cut a damaged WAL at the damage (logging what is lost) instead of refusing",
           is_switch=True),
]


def build_arg_parser(version: str) -> argparse.ArgumentParser:
    """The argparse parser for ``pion-server``; values stay strings until ``load_config``."""
    parser = argparse.ArgumentParser(prog="pion-server",
                                     description="Redis-protocol server holding LLM K/V caches.")
    for opt in OPTIONS:
        if opt.is_switch:
            parser.add_argument(*opt.flags, dest=opt.field, action="store_const", const="yes",
                                default=None, help=opt.help)
        else:
            parser.add_argument(*opt.flags, dest=opt.field, default=None, metavar="VALUE",
                                help=opt.help + f" [env {opt.env_name}]")
    parser.add_argument("--version", action="version", version=f"pion-server {version}")
    return parser


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
                version: str = "0") -> ServerConfig:
    """Build the config from argv (CLI wins) and env (``PION_*``); raises ConfigError."""
    environ = os.environ if env is None else env
    args = build_arg_parser(version).parse_args(list(argv) if argv is not None else None)
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw = getattr(args, opt.field)
        key = opt.flags[-1]
        if raw is None and opt.env_name in environ:
            raw, key = environ[opt.env_name], opt.env_name
        if raw is not None:
            values[opt.field] = opt.parse(key, raw)
    return ServerConfig(**values)


def python_log_level(level: str) -> int:
    """Map Redis-style log levels onto ``logging`` levels."""
    return {"debug": logging.DEBUG, "verbose": logging.DEBUG, "info": logging.INFO,
            "notice": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}[level]
