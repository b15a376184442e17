"""pion-server configuration: one frozen dataclass built once from CLI flags and ``PION_*`` env.

Precedence: a flag on the command line wins over the environment, which wins over the
default. Every option is declared once in ``OPTIONS`` (flag, dataclass field, parser,
help); the environment name is derived from the field (``max_sessions`` ->
``PION_MAX_SESSIONS``). The loading mechanics are ``pion.common.options``, shared with
pion-llm and pion-serve. To add an option (the persistence family adds ``--appendfsync``,
``--wal-max-bytes``, ``--wal-repair``), add a field to ``ServerConfig`` and one
``Option`` row — nothing else reads argv or the environment.

Errors name the key and the bad value (``ConfigError``); ``main`` prints them and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pion.common.errors import ConfigError
from pion.common.logs import LOG_LEVELS, python_log_level
from pion.common.options import (Option, load_options, parse_bool, parse_byte_size, parse_choice, parse_float,
                                 parse_int, parse_optional_text, parse_path, parse_positive_size, parse_text)
from pion.common.options import build_arg_parser as build_arg_parser_for
from pion.common.ports import PION_SERVER_PORT
from pion.server.store.eviction import POLICIES
from pion.server.tenants import TenantSpec, parse_tenants
from pion.server.coldtier.url import parse_cold_tier_option

DEFAULT_PORT = PION_SERVER_PORT
__all__ = ["DEFAULT_PORT", "LOG_LEVELS", "OPTIONS", "ServerConfig", "build_arg_parser", "load_config",
           "python_log_level"]


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
    appendonly: bool = True  # False: no WAL is written or replayed (a cache, like Redis appendonly no)
    appendfsync: str = "everysec"  # WAL fsync policy: always | everysec | no (Redis semantics)
    wal_max_bytes: int = 1024**3  # a background snapshot starts when the WAL passes this
    wal_repair: bool = False  # cut a damaged WAL at the damage instead of refusing to start
    binary_port: int = -1  # ATTEND binary fast lane: -1 = port + 1, 0 = off
    attention_threads: int = 1  # torch intra-op threads for ATTEND kernels (0 = torch's default)
    tenants: tuple[TenantSpec, ...] = ()  # --tenant name:password:ns-prefix (server/tenants.py)
    ns_prefix: str | None = None  # confines the default user to this prefix
    admission: str = "always"  # KV.PREFIX.REGISTER admission: always | 2hit (server/admission.py)
    admission_window: int = 65536  # 2hit: namespaces the ghost list remembers (oldest forgotten)
    worker_port_base: int = -1  # -w N: worker i also listens on base + i (-1 = port + 100; 0 = any free port)
    independent_workers: bool = False  # -w N without the directory: N separate stores (docs/workers.md)
    worker_placement: str = "connection"  # where a new namespace goes under -w N: connection | hash
    directory_slots: int = 16384  # entries of the cross-worker directory (64 bytes each)
    # -w N: at most this many of a client's pipelined forwarded commands sent at once (1 = one by one)
    worker_forward_batch: int = 1024
    databases: int = 16  # numbered keyspaces for SELECT (Redis's default)
    maxmemory_policy: str = "allkeys-lru"  # which keys go under --maxmemory (docs/keyspace.md)
    maxmemory_samples: int = 5  # keys sampled per database per eviction (Redis's default)
    cold_tier: str | None = None  # redis-cluster://h:p[,h:p...] | redis://h:p (docs/scale-out.md)
    cold_tier_mode: str = "through"  # through: ack after the cluster write | behind: flush later
    # TLS (Redis's option names; server/tls.py): a second RESP listener and binary lane, 0 = off
    tls_port: int = 0
    tls_binary_port: int = -1  # -1 = tls_port + 1, 0 = off
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_ca_cert_file: Path | None = None
    tls_auth_clients: str = "yes"  # yes | no | optional, Redis's default
    metrics_port: int = 0  # Prometheus text on http://bind:metrics_port/metrics (server/metrics.py); 0 = off

    def summary(self) -> str:
        """One line with every field, for the start-up log (the password is masked)."""
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "requirepass" and value:
                value = "***"
            elif f.name == "tenants":
                value = ",".join(f"{t.name}:***:{t.prefix}" for t in value)
            parts.append(f"{f.name}={value}")
        return " ".join(parts)


MAX_WORKERS = 64


def _optional_path(key: str, text: str) -> Path | None:
    return Path(text) if text else None


OPTIONS: list[Option] = [
    Option(("--port",), "port", parse_int(0, 65535), f"TCP port (default {DEFAULT_PORT})"),
    Option(("--bind",), "bind", parse_text, "address to listen on (default 127.0.0.1)"),
    Option(("--kvcache",), "kvcache", parse_bool, "accepted for compatibility; KV families are always on",
           switch="yes"),
    Option(("-w", "--workers"), "workers", parse_int(1, MAX_WORKERS),
           "worker processes behind the one port (default 1: a single process; docs/workers.md)"),
    Option(("--dir",), "data_dir", parse_path, "data directory (default ./pion-data)"),
    Option(("--requirepass",), "requirepass", parse_optional_text, "password clients must AUTH with"),
    Option(("--max-sessions",), "max_sessions", parse_int(1), "V-store session limit (default 256)"),
    Option(("--maxmemory",), "maxmemory", parse_byte_size, "V-store + keyspace byte budget, e.g. 8gb (0 = unlimited)"),
    Option(("--prefill-us-per-token",), "prefill_us_per_token", parse_float(0.0),
           "estimated prefill cost per token for the receipt (default 555)"),
    Option(("--loglevel",), "loglevel", parse_choice(*LOG_LEVELS), "debug|verbose|info|notice|warning|error"),
    Option(("--maxclients",), "maxclients", parse_int(1), "maximum simultaneous clients (default 10000)"),
    Option(("--proto-max-bulk-len",), "proto_max_bulk_len", parse_positive_size,
           "largest bulk string a request may carry (default 512mb)"),
    Option(("--client-query-buffer-limit",), "client_query_buffer_limit", parse_positive_size,
           "largest single request still being received (default 1gb)"),
    Option(("--client-output-buffer-limit",), "client_output_buffer_limit", parse_byte_size,
           "disconnect a client whose unsent replies exceed this (default 1gb; 0 = no limit)"),
    Option(("--slowlog-log-slower-than",), "slowlog_log_slower_than_us", parse_int(-1),
           "keep commands slower than this many microseconds in SLOWLOG (default 10000; -1 = off, 0 = all)"),
    Option(("--slowlog-max-len",), "slowlog_max_len", parse_int(0),
           "SLOWLOG ring size: entries kept, oldest dropped first (default 128)"),
    Option(("--embed-threads",), "embed_threads", parse_int(0),
           "torch CPU threads of the AI.* embedding model (default 1; 0 = torch's default, one per core)"),
    Option(("--hz",), "hz", parse_int(1, 500), "active-expiry cycles per second (default 10)"),
    Option(("--appendonly",), "appendonly", parse_bool,
           "yes (default): log every write to the WAL and replay it at start-up; no: keep nothing "
           "across restarts but what SAVE/BGSAVE write (docs/operations.md)"),
    Option(("--appendfsync",), "appendfsync", parse_choice("always", "everysec", "no"),
           "WAL fsync policy: always (reply after fsync) | everysec (default) | no"),
    Option(("--wal-max-bytes",), "wal_max_bytes", parse_positive_size,
           "start a background snapshot when the WAL passes this size (default 1gb)"),
    Option(("--wal-repair",), "wal_repair", parse_bool,
           "at start-up, cut a damaged WAL at the damage (logging what is lost) instead of refusing",
           switch="yes"),
    Option(("--binary-port",), "binary_port", parse_int(-1, 65535),
           "binary fast lane for ATTEND.PREFIX queries (default: port + 1; 0 = off)"),
    Option(("--attention-threads",), "attention_threads", parse_int(0, 1024),
           "torch threads for ATTEND kernels (default 1: no spin-wait against clients; 0 = torch default)"),
    Option(("--tenant",), "tenants", parse_tenants,
           "a tenant <name>:<password>:<ns-prefix>: AUTH <name> <password> confines a connection "
           "to keys/namespaces starting with the prefix (docs/security.md)", repeat=True),
    Option(("--ns-prefix",), "ns_prefix", parse_optional_text,
           "confine the default user (--requirepass, or no password) to this key/namespace prefix"),
    Option(("--admission",), "admission", parse_choice("always", "2hit"),
           "KV.PREFIX.REGISTER admission: always (default) | 2hit (first register answers +DEFERRED)"),
    Option(("--admission-window",), "admission_window", parse_int(1),
           "2hit: how many deferred namespaces the ghost list remembers (default 65536)"),
    Option(("--worker-port-base",), "worker_port_base", parse_int(-1, 65535),
           "-w N: worker i also listens on this + i (default port + 100; 0 = any free ports)"),
    Option(("--independent-workers",), "independent_workers", parse_bool,
           "-w N: no cross-worker directory; each worker is its own store on its own address",
           switch="yes"),
    Option(("--worker-placement",), "worker_placement", parse_choice("connection", "hash"),
           "-w N: a new namespace goes to the connection's worker (default) or to crc32(name) % N"),
    Option(("--directory-slots",), "directory_slots", parse_int(64, 1 << 24),
           "-w N: entries of the cross-worker directory (default 16384, 64 bytes each)"),
    Option(("--worker-forward-batch",), "worker_forward_batch", parse_int(1, 1 << 20),
           "-w N: at most this many of a client's pipelined keyspace commands are forwarded to "
           "worker 0 in one batch (default 1024; 1 = one command at a time)"),
    Option(("--databases",), "databases", parse_int(1, 1024),
           "numbered keyspaces SELECT can choose (default 16, like Redis)"),
    Option(("--maxmemory-policy",), "maxmemory_policy", parse_choice(*POLICIES),
           "which keys leave under --maxmemory: allkeys-lru (default: a cache) | noeviction | "
           "allkeys-lfu | allkeys-random | volatile-lru | volatile-lfu | volatile-random | volatile-ttl"),
    Option(("--maxmemory-samples",), "maxmemory_samples", parse_int(1, 64),
           "keys sampled per database for each eviction (default 5, like Redis)"),
    Option(("--cold-tier",), "cold_tier", parse_cold_tier_option,
           "shared cold tier: redis-cluster://host:port[,host:port...] or redis://host:port (default: none)"),
    Option(("--cold-tier-mode",), "cold_tier_mode", parse_choice("through", "behind"),
           "through (default: reply after the cold tier has the rows) | behind (copy them shortly after)"),
    Option(("--tls-port",), "tls_port", parse_int(0, 65535), "TLS RESP port (default 0 = no TLS listener)"),
    Option(("--tls-binary-port",), "tls_binary_port", parse_int(-1, 65535),
           "TLS binary lane (default: tls-port + 1 when --tls-port is set; 0 = off)"),
    Option(("--tls-cert-file",), "tls_cert_file", _optional_path, "server certificate (PEM) for the TLS ports"),
    Option(("--tls-key-file",), "tls_key_file", _optional_path, "private key (PEM) of --tls-cert-file"),
    Option(("--tls-ca-cert-file",), "tls_ca_cert_file", _optional_path,
           "CA bundle (PEM) that client certificates must chain to"),
    Option(("--tls-auth-clients",), "tls_auth_clients", parse_choice("yes", "no", "optional"),
           "require a client certificate: yes (default) | optional (verify one if sent) | no"),
    Option(("--metrics-port",), "metrics_port", parse_int(0, 65535),
           "serve Prometheus metrics on this HTTP port at /metrics (default 0 = off)"),
]


DESCRIPTION = "Redis-protocol server holding LLM K/V caches."


def build_arg_parser(version: str) -> argparse.ArgumentParser:
    """The argparse parser for ``pion-server``; values stay strings until ``load_config``."""
    return build_arg_parser_for("pion-server", DESCRIPTION, OPTIONS, version)


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
                version: str = "0") -> ServerConfig:
    """Build the config from argv (CLI wins) and env (``PION_*``); raises ConfigError."""
    config = ServerConfig(**load_options("pion-server", DESCRIPTION, OPTIONS, argv, env, version))
    return config
