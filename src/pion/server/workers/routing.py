"""How ``pion-server -w N`` answers a command on any worker: wrap the command table once.

Each worker runs the same handlers; ``route_table`` replaces some of them with a wrapper that
decides, per call, whether to run locally, redirect the client or ask a sibling:

* **sessions stay with their owner.** ``V.STOREBATCH``/``V.FETCH``/``V.MFETCH``/``V.INFO``,
  ``KV.PREFIX.BLOCKS``/``MEMBERSHIP``/``WARM``, ``SSM.PREFIX.*`` and ``ATTEND.PREFIX.*`` on a
  name the directory places on another worker answer ``-ERR <command> session lives on worker
  N <host:port>`` (Redis Cluster's ``-MOVED``, in the original design's words (docs/design.md)); the client reconnects to
  that address (``pion.lmcache.PionStore`` and ``PionPromptCache`` do it for you).
* **creating places.** ``V.CREATE``/``KV.PREFIX.REGISTER[.SCHEMA]``/``ATTEND.PREFIX.STORE`` of a
  new name claim it for the connection's worker (``--worker-placement connection``) or for
  ``crc32(name) % N`` (``hash``: other workers redirect the creation there).
* **lookups answer anywhere.** ``KV.PREFIX.LOOKUP`` of a namespace another worker owns answers
  from the directory (complete or not, its tokens and PREFILL_MS), and counts in this worker's
  receipt; ``KV.PREFIX.INFO`` adds the group's totals.
* **the keyspace has one owner: worker 0.** Every command of the keyspace, hash and FT.*
  families and ``AI.SEMANTIC_CACHE`` is forwarded by the other workers to worker 0 over a link
  all clients share (one per RESP version and db; requests of one loop iteration go out in one
  write, ``peer.SharedLink``) and the reply is relayed byte for byte — so a key written through any connection is read through any other, with Redis's
  semantics (worker 0 is the only one that runs them).
* **group-wide commands fan out.** ``SAVE``/``BGSAVE``/``KV.PREFIX.SAVE`` (no path) and
  ``FLUSHALL`` run on every worker; ``V.DROP``/``KV.PREFIX.DROP`` drop each name on its owner;
  ``V.LIST`` lists every worker's sessions; ``PION.STATS ALL`` sums every worker's receipt
  (plain ``PION.STATS`` stays this worker's, as the original design says).

Requests arriving over a sibling's link (named ``pion-worker-peer``) always run locally.
Every forwarded or fanned-out request travels as the calling connection's user (a tenant's link
logs in with the tenant's credentials, ``WorkerRuntime.link_auth``), so the worker that runs it
applies the tenant's key check and shows only the tenant's own in KEYS/SCAN/DBSIZE/V.LIST/
PION.STATS/KV.PREFIX.INFO — the same answers as under ``-w 1``.
``--independent-workers`` wraps only ``PION.STATS``: each worker is its own store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pion.common.errors import CommandError
from pion.common.ids import k_session, v_session
from pion.server.commands.kvprefix import HIT, MISS, parse_lookup_options
from pion.server.commands.spec import Handler
from pion.server.commands.store_args import option, word
from pion.server.resp.replies import RawReply
from pion.server.tenants import receipt_for
from pion.server.workers.directory import KIND_ATTEND, KIND_PREFIX, KIND_SESSION, DirectoryFull
from pion.server.workers.peer import PEER_NAME
from pion.server.workers.runtime import WorkerRuntime

if TYPE_CHECKING:
    from pion.server.commands.spec import CommandSpec
    from pion.server.commands.table import CommandTable
    from pion.server.context import CommandContext, ServerState

FORWARD_FAMILIES = ("pion.server.commands.keyspace", "pion.server.commands.hashes",
                    "pion.server.commands.strings", "pion.server.commands.search")
# SELECT stays local (it sets the connection's db, which travels with every forwarded request).
FORWARD_COMMANDS = frozenset({"AI.SEMANTIC_CACHE", "FLUSHDB", "SWAPDB", "MOVE", "COPY"})
SESSION_COMMANDS = frozenset({"V.STOREBATCH", "V.FETCH", "V.MFETCH", "V.INFO"})
PREFIX_COMMANDS = frozenset({"KV.PREFIX.BLOCKS", "KV.PREFIX.MEMBERSHIP", "KV.PREFIX.WARM",
                             "SSM.PREFIX.STORE", "SSM.PREFIX.FETCH", "SSM.PREFIX.MFETCH",
                             "SSM.PREFIX.DROP"})
SAVE_COMMANDS = frozenset({"SAVE", "BGSAVE", "KV.PREFIX.SAVE"})
RATE_FIELDS = {"kvprefix_hit_rate": ("kvprefix_hits", "kvprefix_misses"),
               "semantic_hit_rate": ("semantic_hits", "semantic_misses")}


def redirect_error(command: str, owner: int, runtime: WorkerRuntime) -> CommandError:
    """``-ERR <command> session lives on worker N <host:port>`` (clients parse the address)."""
    return CommandError(f"{command} session lives on worker {owner} {runtime.address(owner)}")


def _runtime(ctx: CommandContext) -> WorkerRuntime:
    runtime = ctx.server.worker
    assert runtime is not None  # route_table only runs in a worker of -w N
    return runtime


def _from_peer(ctx: CommandContext) -> bool:
    return ctx.client.name.encode() == PEER_NAME


def schema_text(k_formats: tuple[str, ...], v_formats: tuple[str, ...]) -> str:
    if len(set(k_formats) | set(v_formats)) == 1:
        return k_formats[0]
    return f"k={','.join(k_formats)};v={','.join(v_formats)}"


# ---- publishing what this worker holds ------------------------------------------------------
def sync_prefix(state: ServerState, ns: str) -> None:
    """Publish (or retract) namespace ``ns`` and its two sessions from the local V-store."""
    runtime = state.worker
    if runtime is None or runtime.directory is None:
        return
    vstore = state.stores.vstore
    entry = vstore.prefix(ns)
    if entry is None:
        _retract(runtime, KIND_PREFIX, ns)
    else:
        complete, tokens = vstore.peek_prefix(ns)
        _publish(runtime, KIND_PREFIX, ns, complete=complete, tokens=tokens, prefill_ms=entry.prefill_ms,
                 schema=schema_text(entry.k_formats, entry.v_formats))
    for sid in (k_session(ns), v_session(ns)):
        sync_session(state, sid, with_prefix=False)


def sync_session(state: ServerState, sid: str, with_prefix: bool = True) -> None:
    runtime = state.worker
    if runtime is None or runtime.directory is None:
        return
    session = state.stores.vstore.get(sid)
    if session is None:
        _retract(runtime, KIND_SESSION, sid)
    else:
        _publish(runtime, KIND_SESSION, sid, complete=True, tokens=session.rows_in(0),
                 schema=session.formats[0] if session.uniform else ",".join(session.formats))
    ns = _namespace_of(sid)
    if with_prefix and ns is not None and state.stores.vstore.prefix(ns) is not None:
        sync_prefix(state, ns)


def _namespace_of(sid: str) -> str | None:
    for side in ("_pk", "_pv"):
        if sid.endswith(side):
            return sid[: -len(side)]
    return None


def _publish(runtime: WorkerRuntime, kind: int, name: str, **fields: Any) -> None:
    assert runtime.directory is not None
    try:
        runtime.directory.publish(kind, name, runtime.worker_id, **fields)
    except DirectoryFull as exc:
        raise CommandError(str(exc)) from None
    runtime.published.add((kind, name))


def _retract(runtime: WorkerRuntime, kind: int, name: str) -> None:
    assert runtime.directory is not None
    runtime.directory.remove(kind, name, runtime.worker_id)
    runtime.published.discard((kind, name))


def publish_all(state: ServerState) -> None:
    """After recovery: forget what this worker published before, publish what it holds now."""
    runtime = state.worker
    if runtime is None or runtime.directory is None:
        return
    runtime.directory.clear_owner(runtime.worker_id)
    runtime.published.clear()
    vstore = state.stores.vstore
    for entry in vstore.iter_prefixes():
        sync_prefix(state, entry.ns)
    for session in vstore.iter_sessions():
        sync_session(state, session.sid, with_prefix=False)


def install_directory_hooks(state: ServerState) -> None:
    """Retract a namespace when the V-store removes it (LRU eviction included), publish one the
    cold tier promoted into this worker (docs/scale-out.md); once per worker."""
    state.stores.vstore.on_prefix_removed.append(lambda ns: _on_prefix_removed(state, ns))
    if state.cold_tier is not None:
        state.cold_tier.on_promoted.append(lambda ns: sync_prefix(state, ns))


def _on_prefix_removed(state: ServerState, ns: str) -> None:
    runtime = state.worker
    if runtime is not None and runtime.directory is not None:
        _retract(runtime, KIND_PREFIX, ns)
        for sid in (k_session(ns), v_session(ns)):
            if state.stores.vstore.get(sid) is None:
                _retract(runtime, KIND_SESSION, sid)


def reconcile(state: ServerState) -> None:
    """Retract names this worker published but no longer holds (evicted plain sessions)."""
    runtime = state.worker
    if runtime is None or runtime.directory is None:
        return
    vstore = state.stores.vstore
    for kind, name in list(runtime.published):
        gone = ((kind == KIND_SESSION and vstore.get(name) is None)
                or (kind == KIND_PREFIX and vstore.prefix(name) is None))
        if gone:
            _retract(runtime, kind, name)


# ---- ownership --------------------------------------------------------------------------------
def _owner(runtime: WorkerRuntime, kind: int, name: str) -> int | None:
    assert runtime.directory is not None
    entry = runtime.directory.get(kind, name)
    return None if entry is None else entry.owner


def _check_local(ctx: CommandContext, command: str, kinds: tuple[int, ...], name: str) -> None:
    """Raise the redirect when another worker owns ``name``; return to run it here."""
    runtime = _runtime(ctx)
    for kind in kinds:
        owner = _owner(runtime, kind, name)
        if owner is not None:
            if owner != runtime.worker_id:
                raise redirect_error(command, owner, runtime)
            return


def _claim(ctx: CommandContext, command: str, kind: int, name: str) -> bool:
    """Claim a new ``name`` for this worker (redirect when it is, or belongs, elsewhere).
    True when this call made the claim (to undo it if the command then fails)."""
    runtime = _runtime(ctx)
    assert runtime.directory is not None
    owner = _owner(runtime, kind, name)
    if owner is None and runtime.placement == "hash":
        home = zlib.crc32(name.encode("utf-8", "surrogateescape")) % runtime.n_workers
        if home != runtime.worker_id:
            raise redirect_error(command, home, runtime)
    if owner is None:
        try:
            owner = runtime.directory.claim(kind, name, runtime.worker_id)
        except DirectoryFull as exc:
            raise CommandError(str(exc)) from None
        if owner == runtime.worker_id:
            runtime.published.add((kind, name))
            return True
    if owner != runtime.worker_id:
        raise redirect_error(command, owner, runtime)
    return False


# ---- wrappers -----------------------------------------------------------------------------------
Before = Callable[["CommandContext", list[bytes]], Any]  # checks (raises the redirect); returns a token
After = Callable[["CommandContext", list[bytes], Any], None]  # gets the token


def _around(handler: Handler, before: Before, after: After | None = None, undo: After | None = None) -> Handler:
    """``before``, the handler, then ``after`` (or ``undo`` when it raised CommandError). An
    ``async`` handler (the cold tier's, docs/scale-out.md) gets an ``async`` wrapper, so the
    dispatcher awaits it and ``after`` runs once its work is done; a sync one stays sync."""
    if inspect.iscoroutinefunction(handler):
        async def routed_async(ctx: CommandContext, args: list[bytes]) -> Any:
            token = before(ctx, args)
            try:
                result = await handler(ctx, args)
            except CommandError:
                if undo is not None:
                    undo(ctx, args, token)
                raise
            if after is not None:
                after(ctx, args, token)
            return result
        return routed_async

    def routed(ctx: CommandContext, args: list[bytes]) -> Any:
        token = before(ctx, args)
        try:
            result = handler(ctx, args)
        except CommandError:
            if undo is not None:
                undo(ctx, args, token)
            raise
        if after is not None:
            after(ctx, args, token)
        return result
    return routed


def _session_wrapper(command: str, handler: Handler) -> Handler:
    def before(ctx: CommandContext, args: list[bytes]) -> None:
        sid = word(args[0])
        if ctx.server.stores.vstore.get(sid) is None:
            _check_local(ctx, command, (KIND_SESSION,), sid)

    def after(ctx: CommandContext, args: list[bytes], _: Any) -> None:
        sync_session(ctx.server, word(args[0]))

    return _around(handler, before, after if command == "V.STOREBATCH" else None)


def _prefix_wrapper(command: str, handler: Handler) -> Handler:
    def before(ctx: CommandContext, args: list[bytes]) -> None:
        ns = word(args[0])
        if ctx.server.stores.vstore.prefix(ns) is None:
            _check_local(ctx, command, (KIND_PREFIX,), ns)

    def after(ctx: CommandContext, args: list[bytes], _: Any) -> None:
        if len(args) >= 4:
            _publish(_runtime(ctx), KIND_ATTEND, word(args[3]))

    return _around(handler, before, after if command == "KV.PREFIX.WARM" else None)


def _attend_wrapper(command: str, handler: Handler) -> Handler:
    store = command == "ATTEND.PREFIX.STORE"

    def before(ctx: CommandContext, args: list[bytes]) -> bool:
        sid = word(args[0])
        _check_local(ctx, command, (KIND_ATTEND, KIND_PREFIX), sid)
        return store and _claim(ctx, command, KIND_ATTEND, sid)

    def undo(ctx: CommandContext, args: list[bytes], claimed: Any) -> None:
        if claimed:
            _retract(_runtime(ctx), KIND_ATTEND, word(args[0]))

    return _around(handler, before, None, undo)


def _create_wrapper(command: str, handler: Handler) -> Handler:
    prefix = command.startswith("KV.PREFIX.")
    kind = KIND_PREFIX if prefix else KIND_SESSION

    def before(ctx: CommandContext, args: list[bytes]) -> bool:
        name = word(args[0])
        vstore = ctx.server.stores.vstore
        local = vstore.prefix(name) is not None if prefix else vstore.get(name) is not None
        if local:
            return False
        if prefix:
            _check_local(ctx, command, (KIND_SESSION,), k_session(name))
        return _claim(ctx, command, kind, name)

    def undo(ctx: CommandContext, args: list[bytes], claimed: Any) -> None:
        if claimed:
            _retract(_runtime(ctx), kind, word(args[0]))

    def after(ctx: CommandContext, args: list[bytes], _: Any) -> None:
        if prefix:
            sync_prefix(ctx.server, word(args[0]))
        else:
            sync_session(ctx.server, word(args[0]))

    return _around(handler, before, after, undo)


def _answer_from_directory(ctx: CommandContext, args: list[bytes]) -> Any:
    """LOOKUP of a namespace another worker owns: HIT/MISS from its directory entry (None:
    no such entry, or it is this worker's: the local handler answers)."""
    ns = word(args[0])
    runtime = _runtime(ctx)
    if ctx.server.stores.vstore.prefix(ns) is not None or runtime.directory is None:
        return None
    entry = runtime.directory.get(KIND_PREFIX, ns)
    if entry is None or entry.owner == runtime.worker_id:
        return None
    tokens, prefill_ms = parse_lookup_options(args)
    receipt = receipt_for(ctx)  # a tenant's own (it also counts into the worker's)
    if not entry.complete:
        receipt.record_prefix_lookup(False)
        return MISS
    receipt.record_prefix_lookup(True, entry.tokens if tokens is None else tokens,
                                 entry.prefill_ms if prefill_ms is None else prefill_ms)
    return HIT


def _lookup_wrapper(command: str, handler: Handler) -> Handler:
    if inspect.iscoroutinefunction(handler):  # the cold tier's: it may promote into this worker
        async def routed_async(ctx: CommandContext, args: list[bytes]) -> Any:
            answer = _answer_from_directory(ctx, args)
            return answer if answer is not None else await handler(ctx, args)
        return routed_async

    def routed(ctx: CommandContext, args: list[bytes]) -> Any:
        answer = _answer_from_directory(ctx, args)
        return answer if answer is not None else handler(ctx, args)
    return routed


def _info_fields(text: bytes) -> dict[str, int]:
    """KV.PREFIX.INFO's ``name:value`` lines as integers (the counts a tenant's totals sum)."""
    fields: dict[str, int] = {}
    for line in text.decode().splitlines():
        key, _, value = line.partition(":")
        if value.lstrip("-").isdigit():
            fields[key] = int(value)
    return fields


async def _tenant_totals(ctx: CommandContext, local: bytes) -> tuple[int, int]:
    """A tenant's prefixes and tokens over every worker: its own KV.PREFIX.INFO on each, summed
    (the directory's totals span every tenant, which a tenant must not see)."""
    fields = _info_fields(local)
    prefixes, tokens = fields["registered_prefixes"], fields["total_prefix_tokens"]
    replies = await _runtime(ctx).broadcast([b"KV.PREFIX.INFO"], ctx.client.tenant)
    error = _peer_error(replies)
    if error is not None:
        raise error
    for reply in replies.values():
        remote = _info_fields(reply)
        prefixes += remote["registered_prefixes"]
        tokens += remote["total_prefix_tokens"]
    return prefixes, tokens


def _info_wrapper(command: str, handler: Handler) -> Handler:
    async def routed(ctx: CommandContext, args: list[bytes]) -> Any:
        local = handler(ctx, args)
        runtime = _runtime(ctx)
        assert runtime.directory is not None and isinstance(local, bytes)
        if _from_peer(ctx):
            return local
        if ctx.client.tenant is not None:
            prefixes, tokens = await _tenant_totals(ctx, local)
        else:
            prefixes, tokens = runtime.directory.totals()
        extra = (f"worker_id:{runtime.worker_id}\r\nworkers:{runtime.n_workers}\r\n"
                 f"cluster_registered_prefixes:{prefixes}\r\ncluster_total_prefix_tokens:{tokens}\r\n")
        return local + extra.encode()
    return routed


def _forward_wrapper(command: str, handler: Handler) -> Handler:
    name = command.encode()

    async def routed(ctx: CommandContext, args: list[bytes]) -> Any:
        client = ctx.client
        link = _runtime(ctx).keyspace_link(client.protocol, client.db, client.tenant)
        try:
            raw = await link.call([name, *args])
        except ConnectionError as exc:
            raise CommandError(f"{command}: the keyspace lives on worker 0, which did not answer ({exc})") from None
        return RawReply(raw)
    return routed


async def _call(handler: Handler, ctx: CommandContext, args: list[bytes]) -> Any:
    result = handler(ctx, args)
    return await result if inspect.isawaitable(result) else result


def _peer_error(replies: dict[int, Any]) -> CommandError | None:
    for worker, reply in sorted(replies.items()):
        if isinstance(reply, Exception):
            return CommandError(f"worker {worker}: {reply}")
    return None


def _fanout_wrapper(command: str, handler: Handler) -> Handler:
    """SAVE/BGSAVE/KV.PREFIX.SAVE (without a path) and FLUSHALL: here, then on every sibling."""
    name = command.encode()

    async def routed(ctx: CommandContext, args: list[bytes]) -> Any:
        result = await _call(handler, ctx, args)
        if command == "FLUSHALL":
            publish_all(ctx.server)
        if _from_peer(ctx) or (command == "KV.PREFIX.SAVE" and args):
            return result
        error = _peer_error(await _runtime(ctx).broadcast([name, *args], ctx.client.tenant))
        if error is not None:
            raise error
        return result
    return routed


def _drop_wrapper(command: str, handler: Handler) -> Handler:
    kind = KIND_PREFIX if command == "KV.PREFIX.DROP" else KIND_SESSION
    name = command.encode()

    async def routed(ctx: CommandContext, args: list[bytes]) -> Any:
        runtime = _runtime(ctx)
        remote: dict[int, list[bytes]] = {}
        local: list[bytes] = []
        for arg in args:
            owner = None if _from_peer(ctx) else _owner(runtime, kind, word(arg))
            if owner is None or owner == runtime.worker_id:
                local.append(arg)
            else:
                remote.setdefault(owner, []).append(arg)
        dropped = int(await _call(handler, ctx, local)) if local else 0
        for arg in local:
            if kind == KIND_PREFIX:
                sync_prefix(ctx.server, word(arg))
            else:
                sync_session(ctx.server, word(arg))
        for owner, names in sorted(remote.items()):
            reply = await runtime.peer(owner, ctx.client.tenant).call_value([name, *names])
            if isinstance(reply, Exception):
                raise CommandError(f"worker {owner}: {reply}")
            dropped += int(reply)
        return dropped
    return routed


def _list_wrapper(command: str, handler: Handler) -> Handler:
    async def routed(ctx: CommandContext, args: list[bytes]) -> Any:
        names = set(await _call(handler, ctx, args))
        if _from_peer(ctx):
            return sorted(names)
        replies = await _runtime(ctx).broadcast([b"V.LIST", *args], ctx.client.tenant)
        error = _peer_error(replies)
        if error is not None:
            raise error
        for reply in replies.values():
            names.update(reply)
        return sorted(names)
    return routed


def _stats_wrapper(command: str, handler: Handler) -> Handler:
    async def routed(ctx: CommandContext, args: list[bytes]) -> Any:
        if not (len(args) == 1 and option(args[0]) == "ALL"):
            return await _call(handler, ctx, args)
        # This worker's receipt as PION.STATS shows it (the tenant's own for a tenant; with the
        # admission fields under --admission 2hit), then every sibling's, read as the same user.
        totals: dict[str, Any] = dict(await _call(handler, ctx, args))
        replies = await _runtime(ctx).broadcast([b"PION.STATS"], ctx.client.tenant)
        error = _peer_error(replies)
        if error is not None:
            raise error
        for reply in replies.values():
            pairs = iter(reply)
            for key, value in zip(pairs, pairs, strict=True):
                field = key.decode()
                number = float(value) if isinstance(value, bytes) else value
                totals[field] = (max(totals[field], number) if field == "uptime_seconds"
                                 else totals[field] + number)
        for rate, (hits, misses) in RATE_FIELDS.items():
            seen = totals[hits] + totals[misses]
            totals[rate] = totals[hits] / seen if seen else 0.0
        return totals
    return routed


Wrapper = Callable[[str, Handler], Handler]


def _shared_wrappers(worker_id: int, forwarded: set[str]) -> dict[str, Wrapper]:
    wrappers: dict[str, Wrapper] = {name: _session_wrapper for name in SESSION_COMMANDS}
    wrappers.update({name: _prefix_wrapper for name in PREFIX_COMMANDS})
    wrappers.update({name: _create_wrapper for name in ("V.CREATE", "KV.PREFIX.REGISTER",
                                                         "KV.PREFIX.REGISTER.SCHEMA")})
    wrappers.update({name: _fanout_wrapper for name in (*SAVE_COMMANDS, "FLUSHALL")})
    wrappers.update({"KV.PREFIX.LOOKUP": _lookup_wrapper, "KV.PREFIX.INFO": _info_wrapper,
                     "V.DROP": _drop_wrapper, "KV.PREFIX.DROP": _drop_wrapper, "V.LIST": _list_wrapper,
                     "PION.STATS": _stats_wrapper})
    if worker_id != 0:  # worker 0 runs the keyspace itself, on the fast synchronous path
        wrappers.update({name: _forward_wrapper for name in forwarded})
    return wrappers


def route_table(table: CommandTable, runtime: WorkerRuntime,
                lane_specs: dict[str, CommandSpec] | None = None) -> None:
    """Replace the handlers that need the group (module docstring) in ``table.specs``, and in
    ``lane_specs`` — the cold tier's sync Stage-2 variants the binary lane lays over the table
    (``ColdBridge.binary_specs``): routed the same way, a lane frame naming another worker's
    prefix answers the redirect instead of this worker's MISS (docs/workers.md)."""
    if runtime.independent:
        wrappers: dict[str, Wrapper] = {"PION.STATS": _stats_wrapper}
    else:
        forwarded = {spec.name.upper() for module in table.families if module.__name__ in FORWARD_FAMILIES
                     for spec in module.COMMANDS} | FORWARD_COMMANDS
        wrappers = _shared_wrappers(runtime.worker_id, forwarded)
        for name in table.specs:
            if name.startswith("ATTEND.PREFIX."):
                wrappers[name] = _attend_wrapper
    for specs in (table.specs, lane_specs or {}):
        for name, wrap in wrappers.items():
            spec = specs.get(name)
            if spec is not None:
                specs[name] = dataclasses.replace(spec, handler=wrap(name, spec.handler),
                                                  forwarded=wrap is _forward_wrapper)



async def maintain(state: ServerState, interval_s: float = 0.5) -> None:
    """A worker's housekeeping: retract the names the LRU evicted (plain sessions)."""
    while True:
        await asyncio.sleep(interval_s)
        reconcile(state)
