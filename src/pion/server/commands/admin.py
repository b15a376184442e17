"""Connection and server commands standard Redis tools need.

PING ECHO HELLO AUTH CLIENT COMMAND INFO CONFIG QUIT FLUSHALL (SELECT: ``databases.py``).

Replies follow Redis 7 so redis-py, redis-cli and redis-benchmark behave as they do
against Redis: HELLO's map, AUTH's ``-WRONGPASS`` wording, ``COMMAND DOCS`` (redis-cli's
interactive hints), INFO as ``# Section`` blocks (verbatim string under RESP3). INFO's
sections beyond Server/Clients/Memory come from the families' ``info(state)`` hooks; CPU
(getrusage), Commandstats and Errorstats (the dispatcher's counters) are Redis's formats.
"""

from __future__ import annotations

import hmac
import os
import platform
import resource
import sys
import time
from typing import TYPE_CHECKING, Any

from pion import __version__
from pion._compiled import status as compiled_status
from pion.common.errors import CommandError, arity_error, clip_for_echo
from pion.server.commands.spec import CommandSpec
from pion.server.errors import SYNTAX_ERROR, WRONGPASS
from pion.server.context import ClientState, CommandContext
from pion.server.resp.replies import OK, SimpleString, Verbatim

if TYPE_CHECKING:
    from pion.server.dispatcher import Dispatcher

REDIS_COMPAT_VERSION = "7.2.0"  # the Redis whose protocol and replies we follow
_BAD_NAME_CHARS = frozenset(range(0, 33)) | {127}


def _check_password(ctx: CommandContext, user: bytes, password: bytes) -> None:
    """Authenticate the client as the admin or a tenant, or raise -WRONGPASS (constant-time
    comparison; server/tenants.py). A failed AUTH leaves the connection as it was."""
    tenants = ctx.server.tenants
    if tenants is None:  # a state built without the registry (unit tests): default user only
        expected = ctx.server.config.requirepass
        if user.lower() != b"default" or (
                expected is not None and not hmac.compare_digest(password, expected.encode())):
            raise CommandError(WRONGPASS, code="WRONGPASS")
        ctx.client.authenticated = True
        return
    try:
        ctx.client.tenant = tenants.authenticate(user, password)
    except LookupError:
        raise CommandError(WRONGPASS, code="WRONGPASS") from None
    ctx.client.authenticated = True


def _valid_name(raw: bytes) -> str:
    if any(b in _BAD_NAME_CHARS for b in raw):
        raise CommandError("Client names cannot contain spaces, newlines or special characters.")
    return raw.decode("utf-8", "replace")


# ---- connection -----------------------------------------------------------------------------
_PONG = SimpleString("PONG")  # one instance: a frozen dataclass costs ~0.3 µs to build per PING


def cmd_admin_ping(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) > 1:
        raise arity_error("ping")
    return args[0] if args else _PONG


def cmd_admin_echo(ctx: CommandContext, args: list[bytes]) -> Any:
    return args[0]


def cmd_admin_auth(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) > 2:
        raise CommandError(SYNTAX_ERROR)
    if len(args) == 1 and ctx.server.config.requirepass is None and not ctx.server.config.tenants:
        raise CommandError("AUTH <password> called without any password configured for the "
                           "default user. Are you sure your configuration is correct?")
    user, password = (b"default", args[0]) if len(args) == 1 else (args[0], args[1])
    _check_password(ctx, user, password)
    return OK


def cmd_admin_hello(ctx: CommandContext, args: list[bytes]) -> Any:
    protocol = ctx.client.protocol
    auth: tuple[bytes, bytes] | None = None
    name: str | None = None
    if args:
        try:
            protocol = int(args[0])
        except ValueError:
            raise CommandError("Protocol version is not an integer or out of range") from None
        i = 1
        while i < len(args):
            opt = args[i].upper()
            if opt == b"AUTH" and i + 2 < len(args):
                auth = (args[i + 1], args[i + 2])
                i += 3
            elif opt == b"SETNAME" and i + 1 < len(args):
                name = _valid_name(args[i + 1])
                i += 2
            else:
                raise CommandError(f"Syntax error in HELLO option '{clip_for_echo(args[i])}'")
        if protocol not in (2, 3):
            raise CommandError("unsupported protocol version", code="NOPROTO")
    if auth is not None:
        _check_password(ctx, *auth)
    elif ctx.server.dispatcher.auth_required and not ctx.client.authenticated:
        raise CommandError("HELLO must be called with the client already authenticated, "
                           "otherwise the HELLO <proto> AUTH <user> <pass> option can be used "
                           "to authenticate the client and select the RESP protocol version "
                           "at the same time", code="NOAUTH")
    ctx.client.protocol = protocol
    if name is not None:
        ctx.client.name = name
    return {"server": "redis", "version": REDIS_COMPAT_VERSION, "proto": protocol,
            "id": ctx.client.client_id, "mode": "standalone", "role": "master",
            "modules": [], "pion_version": __version__}


def cmd_admin_quit(ctx: CommandContext, args: list[bytes]) -> Any:
    ctx.client.close_after_reply = True
    return OK


# ---- CLIENT ----------------------------------------------------------------------------------
def _client_line(client: ClientState, conn: Any) -> str:
    now = time.time()
    idle = int(conn.idle_seconds()) if conn is not None else 0
    return (f"id={client.client_id} addr={client.addr} laddr= fd=-1 name={client.name} "
            f"age={int(now - client.created_at)} idle={idle} flags=N db={client.db} "
            f"sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 "
            f"obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={client.last_command or 'NULL'} "
            f"user={client.tenant.name if client.tenant else 'default'} redir=-1 resp={client.protocol} "
            f"lib-name={client.lib_name} lib-ver={client.lib_ver}")


def cmd_admin_client(ctx: CommandContext, args: list[bytes]) -> Any:
    sub = args[0].upper()
    rest = args[1:]
    client = ctx.client
    if sub == b"ID" and not rest:
        return client.client_id
    if sub == b"SETNAME" and len(rest) == 1:
        client.name = _valid_name(rest[0])
        return OK
    if sub == b"GETNAME" and not rest:
        return client.name.encode() if client.name else None
    if sub == b"SETINFO" and len(rest) == 2:
        attr = rest[0].upper()
        if attr not in (b"LIB-NAME", b"LIB-VER"):
            raise CommandError(f"Unrecognized option '{clip_for_echo(rest[0])}'")
        value = _valid_name(rest[1])
        if attr == b"LIB-NAME":
            client.lib_name = value
        else:
            client.lib_ver = value
        return OK
    if sub == b"INFO" and not rest:
        conns = ctx.server.network.clients
        return Verbatim(_client_line(client, conns.get(client.client_id)) + "\n")
    if sub == b"LIST":
        return Verbatim(_client_list(ctx, rest))
    if sub == b"HELP":
        return [SimpleString(line) for line in (
            "CLIENT <subcommand> [<arg> ...]. Subcommands are:",
            "ID", "SETNAME <name>", "GETNAME", "SETINFO <LIB-NAME|LIB-VER> <value>",
            "INFO", "LIST [TYPE normal] [ID <id> ...]", "HELP")]
    if sub in (b"ID", b"SETNAME", b"GETNAME", b"SETINFO", b"INFO"):
        raise arity_error(f"client|{sub.decode().lower()}")
    raise CommandError(f"unknown subcommand '{clip_for_echo(args[0])}'. Try CLIENT HELP.")


def _client_list(ctx: CommandContext, rest: list[bytes]) -> str:
    conns = ctx.server.network.clients
    wanted: set[int] | None = None
    if rest:
        opt = rest[0].upper()
        if opt == b"TYPE" and len(rest) == 2:
            if rest[1].lower() not in (b"normal", b"master", b"replica", b"pubsub"):
                raise CommandError(f"Unknown client type '{clip_for_echo(rest[1])}'")
            if rest[1].lower() != b"normal":
                return ""
        elif opt == b"ID" and len(rest) >= 2:
            try:
                wanted = {int(x) for x in rest[1:]}
            except ValueError:
                raise CommandError("Invalid client ID") from None
        else:
            raise CommandError(SYNTAX_ERROR)
    lines = [_client_line(conn.client, conn) for cid, conn in sorted(conns.items())
             if wanted is None or cid in wanted]
    return "".join(line + "\n" for line in lines)


# ---- COMMAND ---------------------------------------------------------------------------------
def _command_info(spec: CommandSpec) -> list[Any]:
    flags = sorted(spec.flags - {"noauth"}) + (["no_auth"] if "noauth" in spec.flags else [])
    first, last, step = spec.access.legacy_key_range() if spec.access is not None else (0, 0, 0)
    return [spec.name.lower(), spec.arity, [SimpleString(f) for f in flags], first, last, step, [], [], [],
            []]


def _command_docs(spec: CommandSpec) -> dict[str, Any]:
    group = "pion" if "." in spec.name else "generic"
    return {"summary": spec.summary or spec.name, "since": "1.0.0", "group": group,
            "complexity": "O(1)" if "fast" in spec.flags else "O(N)"}


def cmd_admin_command(ctx: CommandContext, args: list[bytes]) -> Any:
    specs = ctx.server.table.specs
    if not args:
        return [_command_info(spec) for spec in specs.values()]
    sub = args[0].upper()
    names = [a.decode("utf-8", "replace").upper() for a in args[1:]]
    if sub == b"COUNT" and not names:
        return len(specs)
    if sub == b"INFO":
        chosen = names or list(specs)
        return [_command_info(specs[n]) if n in specs else None for n in chosen]
    if sub == b"DOCS":
        chosen = names or list(specs)
        return {n.lower(): _command_docs(specs[n]) for n in chosen if n in specs}
    if sub == b"LIST" and not names:
        return [n.lower() for n in specs]
    raise CommandError(f"unknown subcommand or wrong number of arguments for "
                       f"'{clip_for_echo(args[0])}'. Try COMMAND HELP.")


# ---- INFO / CONFIG ---------------------------------------------------------------------------
def _human(n_bytes: int) -> str:
    for unit, size in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n_bytes >= size:
            return f"{n_bytes / size:.2f}{unit}"
    return f"{n_bytes}B"


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _core_sections(ctx: CommandContext) -> dict[str, list[tuple[str, object]]]:
    cfg = ctx.server.config
    uptime = int(time.time() - ctx.server.started_at)
    rss = _rss_bytes()
    used = ctx.server.stores.used_bytes
    clients = ctx.server.network.clients
    return {
        "Server": [
            ("redis_version", REDIS_COMPAT_VERSION), ("pion_version", __version__),
            ("redis_mode", "standalone"), ("os", f"{platform.system()} {platform.release()}"),
            ("arch_bits", 64 if sys.maxsize > 2**32 else 32),
            ("python_version", platform.python_version()), ("compiled", compiled_status()),
            ("process_id", os.getpid()),
            ("tcp_port", cfg.port), ("uptime_in_seconds", uptime),
            ("uptime_in_days", uptime // 86400), ("hz", cfg.hz), ("workers", cfg.workers),
            ("data_dir", str(cfg.data_dir)), ("config_file", ""),
        ],
        "Clients": [
            ("connected_clients", len(clients)), ("maxclients", cfg.maxclients),
            ("blocked_clients", 0),
        ],
        "Memory": [
            # used_memory: what --maxmemory bounds (Redis's meaning, less its allocator
            # overhead); used_memory_rss: the process (docs/operations.md, "Memory").
            ("used_memory", used), ("used_memory_human", _human(used)),
            ("used_memory_rss", rss), ("used_memory_rss_human", _human(rss)),
            ("mem_fragmentation_ratio", round(rss / used, 2) if used else 0),
            ("maxmemory", cfg.maxmemory),
            ("maxmemory_human", _human(cfg.maxmemory)),
            ("maxmemory_policy", cfg.maxmemory_policy),
            ("maxmemory_samples", cfg.maxmemory_samples),
            ("pion_session_eviction", maxmemory_policy(cfg.maxmemory, cfg.max_sessions)),
        ],
    }


def maxmemory_policy(maxmemory: int, max_sessions: int) -> str:
    """What INFO reports: the least recently used V-store session (a prefix's K and V sides
    together) is evicted whenever ``--maxmemory`` or ``--max-sessions`` would be passed, so
    the policy is ``lru-sessions`` whenever either bound is set (``--max-sessions`` always
    is: 256 by default). Keyspace keys follow ``--maxmemory-policy`` (INFO ``maxmemory_policy``);
    this is INFO's ``pion_session_eviction``."""
    return "lru-sessions" if maxmemory > 0 or max_sessions > 0 else "noeviction"


def render_info(sections: dict[str, list[tuple[str, object]]]) -> str:
    """Redis's INFO text: ``# Section`` then ``field:value`` lines, blank line between."""
    blocks = []
    for name, fields in sections.items():
        lines = [f"# {name}"] + [f"{k}:{v}" for k, v in fields]
        blocks.append("\r\n".join(lines) + "\r\n")
    return "\r\n".join(blocks)


# Sections only ``INFO all``/``everything`` or their own name ask for (Redis's rule).
NOT_IN_DEFAULT_INFO = frozenset({"commandstats"})


def _cpu_section() -> list[tuple[str, object]]:
    """Redis's CPU section from getrusage (seconds, 6 decimals)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    fields: list[tuple[str, object]] = [
        ("used_cpu_sys", f"{own.ru_stime:.6f}"), ("used_cpu_user", f"{own.ru_utime:.6f}"),
        ("used_cpu_sys_children", f"{children.ru_stime:.6f}"),
        ("used_cpu_user_children", f"{children.ru_utime:.6f}"),
    ]
    if hasattr(resource, "RUSAGE_THREAD"):  # Linux: the event loop's own thread
        main = resource.getrusage(resource.RUSAGE_THREAD)
        fields += [("used_cpu_sys_main_thread", f"{main.ru_stime:.6f}"),
                   ("used_cpu_user_main_thread", f"{main.ru_utime:.6f}")]
    return fields


def _dispatcher(ctx: CommandContext) -> Dispatcher:
    return ctx.server.dispatcher


def _command_sections(ctx: CommandContext) -> dict[str, list[tuple[str, object]]]:
    """CPU, Commandstats and Errorstats with Redis's field formats."""
    dispatcher = _dispatcher(ctx)
    commandstats: list[tuple[str, object]] = []
    for stat in dispatcher.command_stats():
        per_call = stat.usec / stat.calls if stat.calls else 0.0
        commandstats.append((f"cmdstat_{stat.name}",
                             f"calls={stat.calls},usec={stat.usec},usec_per_call={per_call:.2f},"
                             f"rejected_calls={stat.rejected_calls},"
                             f"failed_calls={stat.failed_calls}"))
    errors = dispatcher.error_counts
    return {
        "Stats": [("total_error_replies", sum(errors.values()))],
        "CPU": _cpu_section(),
        "Commandstats": commandstats,
        "Errorstats": [(f"errorstat_{code}", f"count={count}")
                       for code, count in sorted(errors.items())],
    }


def cmd_admin_info(ctx: CommandContext, args: list[bytes]) -> Any:
    """INFO [section ...]: no argument or ``default`` gives every section but
    Commandstats; ``all``/``everything`` add it; names pick sections (any case)."""
    sections = _core_sections(ctx)
    extra = ctx.server.table.info(ctx.server)
    for name, fields in [*extra.items(), *_command_sections(ctx).items()]:
        existing = next((k for k in sections if k.lower() == name.lower()), None)
        sections.setdefault(existing or name, []).extend(fields)
    wanted = {a.decode("utf-8", "replace").lower() for a in args}
    if wanted & {"all", "everything"}:
        pass
    elif not wanted or wanted == {"default"}:
        sections = {k: v for k, v in sections.items() if k.lower() not in NOT_IN_DEFAULT_INFO}
    else:
        if "default" in wanted:
            wanted |= {k.lower() for k in sections} - NOT_IN_DEFAULT_INFO
        sections = {k: v for k, v in sections.items() if k.lower() in wanted}
    return Verbatim(render_info(sections))


def _config_view(ctx: CommandContext) -> dict[str, str]:
    cfg = ctx.server.config
    return {
        "port": str(cfg.port), "bind": cfg.bind, "dir": str(cfg.data_dir),
        "maxmemory": str(cfg.maxmemory), "maxclients": str(cfg.maxclients),
        "proto-max-bulk-len": str(cfg.proto_max_bulk_len),
        "slowlog-log-slower-than": str(cfg.slowlog_log_slower_than_us),
        "slowlog-max-len": str(cfg.slowlog_max_len),
        "hz": str(cfg.hz), "databases": str(len(ctx.server.stores.dbs)), "save": "",
        "maxmemory-policy": cfg.maxmemory_policy, "maxmemory-samples": str(cfg.maxmemory_samples),
        "appendonly": "yes" if cfg.appendonly else "no", "appendfsync": cfg.appendfsync,
        "wal-max-bytes": str(cfg.wal_max_bytes),
        "requirepass": cfg.requirepass or "", "loglevel": cfg.loglevel,
        "max-sessions": str(cfg.max_sessions),
        "prefill-us-per-token": str(cfg.prefill_us_per_token),
        # TLS (tls.py) and the metrics endpoint (metrics.py); files by path, never their contents
        "tls-port": str(cfg.tls_port), "tls-auth-clients": cfg.tls_auth_clients,
        "tls-cert-file": str(cfg.tls_cert_file or ""), "tls-key-file": str(cfg.tls_key_file or ""),
        "tls-ca-cert-file": str(cfg.tls_ca_cert_file or ""), "metrics-port": str(cfg.metrics_port),
    }


def cmd_admin_config(ctx: CommandContext, args: list[bytes]) -> Any:
    """CONFIG GET <pattern>...; CONFIG SET for the eviction budget (``runtime_config.py``)."""
    sub = args[0].upper()
    if sub == b"GET" and len(args) >= 2:
        from pion.server.store.glob import compile_glob

        view = _config_view(ctx)
        found: dict[str, str] = {}
        for pattern in args[1:]:
            regex = compile_glob(pattern.lower())
            found.update({k: v for k, v in view.items() if regex.match(k.encode())})
        return found
    if sub == b"SET":
        from pion.server.runtime_config import config_set

        config_set(ctx.server, args[1:], known=_config_view(ctx).keys())
        return OK
    if sub in (b"RESETSTAT", b"REWRITE"):
        raise CommandError("CONFIG RESETSTAT/REWRITE are not supported: "
                           "pion-server's configuration is fixed at start-up (flags, PION_* env)")
    raise CommandError(f"unknown subcommand '{clip_for_echo(args[0])}'. Try CONFIG HELP.")


def cmd_admin_flushall(ctx: CommandContext, args: list[bytes]) -> Any:
    if len(args) > 1 or (args and args[0].upper() not in (b"ASYNC", b"SYNC")):
        raise CommandError(SYNTAX_ERROR)
    ctx.server.stores.flush_all()
    if ctx.server.admission is not None:  # nothing about the old namespaces survives FLUSHALL
        ctx.server.admission.clear()
    return OK



COMMANDS: list[CommandSpec] = [
    CommandSpec("PING", -1, cmd_admin_ping, frozenset({"fast"}), "Check the connection"),
    CommandSpec("ECHO", 2, cmd_admin_echo, frozenset({"fast"}), "Return the argument"),
    CommandSpec("HELLO", -1, cmd_admin_hello, frozenset({"noauth", "fast"}),
                "Handshake: choose RESP2/RESP3, authenticate, name the connection"),
    CommandSpec("AUTH", -2, cmd_admin_auth, frozenset({"noauth", "fast"}),
                "Authenticate the connection"),
    CommandSpec("QUIT", -1, cmd_admin_quit, frozenset({"noauth", "fast"}),
                "Close the connection after the reply"),
    CommandSpec("CLIENT", -2, cmd_admin_client, frozenset({"admin"}),
                "Connection introspection: ID, SETNAME, GETNAME, SETINFO, INFO, LIST"),
    CommandSpec("COMMAND", -1, cmd_admin_command, frozenset(),
                "Command table introspection: COUNT, INFO, DOCS, LIST"),
    CommandSpec("INFO", -1, cmd_admin_info, frozenset(), "Server information and statistics"),
    CommandSpec("CONFIG", -2, cmd_admin_config, frozenset({"admin"}),
                "Read the effective configuration (CONFIG GET)"),
    CommandSpec("FLUSHALL", -1, cmd_admin_flushall, frozenset({"write"}),
                "Remove every key, session and prefix"),
]
