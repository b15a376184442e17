"""Turn one parsed request into reply bytes: lookup, arity, auth gate, handler, encoding.

This is the only place that converts ``CommandError`` into ``-CODE message`` and the
only place that applies checks every command shares, so handlers validate only their
own arguments. Sync handlers are run and encoded inline (the hot path of a pipelined
``GET``/``SET`` is one dict lookup, one call and one encode); an ``async def`` handler
makes ``execute`` return a coroutine the network layer awaits *before* it parses the
next request from that client, which keeps replies in request order under pipelining.

Commands slower than ``slowlog_log_slower_than_us`` go to the SLOWLOG ring (``log_slow``;
the network layer times sync commands, ``_run_async`` times async ones), not to the log.
"""

from __future__ import annotations

import inspect
import logging
import time
from bisect import bisect_left
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pion.common.errors import CommandError, clip_for_echo
from pion.server.commands.spec import CommandSpec, Handler
from pion.server.context import ClientState, CommandContext
from pion.server.resp.encoder import BULK_HEADS, OK_BYTES, encode_error, encode_reply
from pion.server.resp.replies import OK
from pion.server.slowlog import DEFAULT_MAX_LEN, SlowLogRing, take_untimed_s

if TYPE_CHECKING:
    from pion.server.commands.access import Access
    from pion.server.tenants import TenantRegistry

log = logging.getLogger("pion.server.dispatcher")

_OK: Final = OK  # a static in compiled code, not a module-dict lookup per command
_NOAUTH: Final = b"-NOAUTH Authentication required.\r\n"
_perf_counter: Final = time.perf_counter
_ERR_INTERNAL = "internal error while running '{}' (see the server log)"


@dataclass(slots=True, eq=False)
class _Entry:
    """A CommandSpec flattened for the hot path, with its INFO commandstats counters."""

    spec: CommandSpec
    handler: Handler
    arity: int
    noauth: bool
    is_async: bool
    lname: str
    is_write: bool = False
    write_verbs: frozenset[bytes] = frozenset()  # spec.write_subcommands, as bytes
    access: Access | None = None  # the tenant check's key spec (commands/access.py)
    forwarded: bool = False  # -w N: sent to worker 0 (net.py batches a pipeline's run of them)
    calls: int = 0  # run (failed ones included), like Redis's cmdstat calls
    seconds: float = 0.0  # time spent running it
    rejected_calls: int = 0  # refused before running: arity, NOAUTH
    failed_calls: int = 0  # ran and answered an error
    hist: list[int] | None = None  # latency bucket counts (--metrics-port; enable_latency_histograms)


@dataclass(frozen=True, slots=True)
class CommandStats:
    """One ``cmdstat_<name>`` line of INFO commandstats."""

    name: str
    calls: int
    usec: int
    rejected_calls: int
    failed_calls: int


def _no_handler(ctx: CommandContext, args: list[bytes]) -> Any:
    raise CommandError("no such command")


def unknown_command_message(name: bytes, args: list[bytes]) -> str:
    """Redis's wording: ``unknown command 'x', with args beginning with: 'a' 'b' ``."""
    shown = ""
    for arg in args:
        if len(shown) >= 128:
            break
        shown += "'" + clip_for_echo(arg)[: 128 - len(shown)] + "' "
    return f"unknown command '{clip_for_echo(name)}', with args beginning with: {shown}"


class Dispatcher:
    """Runs commands from a joined command table for every connection of one worker."""

    def __init__(self, specs: dict[str, CommandSpec], requirepass: str | None,
                 slowlog_us: int, slowlog_max_len: int = DEFAULT_MAX_LEN,
                 tenants: TenantRegistry | None = None) -> None:
        self.specs = specs
        self._lookup: dict[bytes, _Entry] = {}
        for name, spec in specs.items():
            entry = _Entry(spec=spec, handler=spec.handler, arity=spec.arity,
                           noauth="noauth" in spec.flags,
                           is_async=inspect.iscoroutinefunction(spec.handler),
                           lname=name.lower(), is_write="write" in spec.flags,
                           write_verbs=frozenset(v.upper().encode() for v in spec.write_subcommands),
                           access=spec.access, forwarded=spec.forwarded)
            if entry.write_verbs and not entry.is_async:
                raise ValueError(f"{name}: write_subcommands needs an async handler")
            self._lookup[name.upper().encode()] = entry
            self._lookup[name.lower().encode()] = entry
        self._auth_required = requirepass is not None or (tenants is not None and tenants.auth_required)
        # Tenants (server/tenants.py): only then is a key spec checked, before the handler runs.
        self._tenancy = tenants is not None and tenants.enabled
        self._default_tenant = None if tenants is None else tenants.default_tenant
        # Error replies by code (INFO errorstats) and the entry of the last sync command,
        # whose run time the network layer adds to it (one clock read per command there).
        self.error_counts: dict[str, int] = {}
        self._unattributed = _Entry(spec=CommandSpec("", 0, _no_handler), handler=_no_handler,
                                    arity=0, noauth=False, is_async=False, lname="")
        self.last_entry: _Entry = self._unattributed
        # Sync commands are timed by the caller (one clock read per command in a batch).
        self.slow_s = slowlog_us / 1e6 if slowlog_us >= 0 else float("inf")
        self.slowlog = SlowLogRing(slowlog_us, slowlog_max_len)  # read by SLOWLOG (commands/slowlog.py)
        # Set once the WAL is attached (state.open_state): each write command's reply slice in
        # ``out`` is recorded in ``client.write_marks`` (net.py turns it into -MISCONF when
        # the batch's WAL write fails).
        self.track_writes = False
        # Upper bounds (seconds) of the latency buckets of the commands that have ``hist``.
        self.latency_bounds: tuple[float, ...] = ()

    def execute(self, ctx: CommandContext, request: list[bytes],
                out: list[Any]) -> Coroutine[Any, Any, None] | None:
        """Run one request (a non-empty list of bytes), appending its reply to ``out``.

        Returns None when the reply is already in ``out``; otherwise a coroutine that
        appends the reply when awaited (the caller must await it before the next request).
        """
        entry = self._lookup.get(request[0])
        if entry is None:
            entry = self._lookup.get(request[0].upper())
            if entry is None:
                self.last_entry = self._unattributed
                self.count_error("ERR")
                out.append(encode_error("ERR", unknown_command_message(request[0], request[1:])))
                return None
        arity = entry.arity
        if (len(request) != arity) if arity > 0 else (len(request) < -arity):
            entry.rejected_calls += 1
            self.last_entry = self._unattributed
            self.count_error("ERR")
            out.append(encode_error("ERR", f"wrong number of arguments for '{entry.lname}' command"))
            return None
        client = ctx.client
        if self._auth_required and not client.authenticated and not entry.noauth:
            entry.rejected_calls += 1
            self.last_entry = self._unattributed
            self.count_error("NOAUTH")
            out.append(_NOAUTH)
            return None
        if self._tenancy and self._refused_for_tenant(entry, client, request, out):
            return None
        client.last_command = entry.lname
        entry.calls += 1
        if entry.is_async:
            return self._run_async(entry, ctx, request, out)
        self.last_entry = entry
        start = len(out)
        try:
            result = entry.handler(ctx, request[1:])
            # Inline the commonest replies (small bulk, +OK) to save the encoder call.
            if type(result) is bytes and len(result) < 1024:
                out.append(BULK_HEADS[len(result)] + result + b"\r\n")
            elif result is _OK:
                out.append(OK_BYTES)
            else:
                encode_reply(result, client.protocol == 3, out)
        except CommandError as exc:
            entry.failed_calls += 1
            self.count_error(exc.code)
            out.append(encode_error(exc.code, exc.message))
        except Exception:
            log.exception("command %s failed", entry.lname)
            entry.failed_calls += 1
            self.count_error("ERR")
            out.append(encode_error("ERR", _ERR_INTERNAL.format(entry.lname)))
        if entry.is_write and self.track_writes:
            client.write_marks.append((start, len(out)))
        return None

    async def _run_async(self, entry: _Entry, ctx: CommandContext, request: list[Any],
                         out: list[Any]) -> None:
        started = _perf_counter()
        start = -1
        is_write = entry.is_write or (bool(entry.write_verbs) and len(request) > 1
                                      and request[1].upper() in entry.write_verbs)
        try:
            result = await entry.handler(ctx, request[1:])
            start = len(out)
            encode_reply(result, ctx.client.protocol == 3, out)
        except CommandError as exc:
            entry.failed_calls += 1
            self.count_error(exc.code)
            out.append(encode_error(exc.code, exc.message))
        except Exception:
            log.exception("command %s failed", entry.lname)
            entry.failed_calls += 1
            self.count_error("ERR")
            out.append(encode_error("ERR", _ERR_INTERNAL.format(entry.lname)))
        if is_write and self.track_writes and start >= 0:
            ctx.client.write_marks.append((start, len(out)))
        # Time the handler spent waiting on start-up work (a model load) is not the command's.
        elapsed = _perf_counter() - started - take_untimed_s()
        entry.seconds += elapsed
        if entry.hist is not None:
            entry.hist[bisect_left(self.latency_bounds, elapsed)] += 1
        if elapsed > self.slow_s:
            self.log_slow(ctx, request, elapsed)

    def _refused_for_tenant(self, entry: _Entry, client: ClientState, request: list[bytes],
                            out: list[Any]) -> bool:
        """-NOPERM when a confined connection names another prefix's data (nothing runs)."""
        tenant = client.tenant
        if tenant is None:
            tenant = client.tenant = self._default_tenant  # --ns-prefix confines the default user
            if tenant is None:
                return False
        access = entry.access
        message = ("this command has no access spec" if access is None
                   else access.refusal(tenant, entry.lname, request[1:]))
        if message is None:
            return False
        entry.rejected_calls += 1
        self.last_entry = self._unattributed
        self.count_error("NOPERM")
        out.append(encode_error("NOPERM", message))
        return True

    def forwards(self, request: list[Any]) -> bool:
        """Whether ``request`` names a command this worker forwards to worker 0 (-w N), so
        the network layer may send it in one batch with the forwarded requests around it."""
        entry = self._lookup.get(request[0]) if type(request[0]) is bytes else None
        if entry is None and type(request[0]) is bytes:
            entry = self._lookup.get(request[0].upper())
        return entry is not None and entry.forwarded

    @property
    def auth_required(self) -> bool:
        """Whether a connection must AUTH first (``--requirepass`` or any ``--tenant``)."""
        return self._auth_required

    def enable_latency_histograms(self, names: Iterable[str], bounds_s: Sequence[float]) -> None:
        """Count the run time of the named commands into buckets with these upper bounds
        (seconds, ascending; one more bucket catches the rest). Costs one ``is not None`` per
        command for the others; the network layer does the counting where it already times."""
        self.latency_bounds = tuple(bounds_s)
        for name in names:
            entry = self._lookup.get(name.upper().encode())
            if entry is not None:
                entry.hist = [0] * (len(self.latency_bounds) + 1)

    def latency_histograms(self) -> list[tuple[str, list[int], float]]:
        """(command, bucket counts, seconds in total) of every command with a histogram."""
        seen: dict[int, _Entry] = {id(e): e for e in self._lookup.values() if e.hist is not None}
        return [(e.lname, list(e.hist or ()), e.seconds) for e in sorted(seen.values(), key=lambda e: e.lname)]

    def count_error(self, code: str) -> None:
        """Count one error reply by its code (Redis's ``errorstat_<CODE>``)."""
        self.error_counts[code] = self.error_counts.get(code, 0) + 1

    def command_stats(self) -> list[CommandStats]:
        """Every command that was called or rejected, for INFO commandstats."""
        seen: dict[int, _Entry] = {id(e): e for e in self._lookup.values()}
        return [CommandStats(e.lname, e.calls, int(e.seconds * 1e6), e.rejected_calls,
                             e.failed_calls)
                for e in sorted(seen.values(), key=lambda e: e.lname)
                if e.calls or e.rejected_calls]

    def reset_stats(self) -> None:
        for entry in self._lookup.values():
            entry.calls = entry.rejected_calls = entry.failed_calls = 0
            entry.seconds = 0.0
            if entry.hist is not None:
                entry.hist = [0] * len(entry.hist)
        self.error_counts.clear()

    def log_slow(self, ctx: CommandContext, request: list[Any], elapsed_s: float) -> None:
        """Record a command that took ``elapsed_s`` (already over ``slow_s``) in the SLOWLOG ring."""
        client = ctx.client
        self.slowlog.record(request, elapsed_s, client.addr, client.name)
