"""The binary fast lane: a second listener (RESP port + 1 by default) for the ATTEND commands.

Framing is ``pion.common.binary_frames`` (magic 0xCA5E). No RESP parsing: a frame's fields are
handed to the same handlers the RESP commands use, so answers and errors are identical; only
the envelope differs. Replies are written as header + body in one scatter-gather write.

Rules: the same users as the RESP port (a password-protected server, or one with ``--tenant``,
answers ``STATUS_NOAUTH`` until an AUTH frame — ``[password]`` or ``[user, password]`` —
succeeds), and the same tenant key check (``commands/access.py``: ``NOPERM`` in an ERR reply); a frame that is not ours (bad magic/version,
lengths that do not add up, a body over ``--client-query-buffer-limit``) gets one ERR reply and
the connection is closed; an unknown command byte gets an ERR reply and the connection stays.
``--binary-port`` moves it, ``0`` turns it off; a port that cannot be bound is logged and the
server runs without it. With ``--tls-port`` the same lane also listens over TLS on
``--tls-binary-port`` (default ``tls-port + 1``; ``tls.py``), with the same client-certificate rule.

Under ``pion-server -w N`` every worker listens on the shared lane port (``SO_REUSEPORT``, like the
RESP port) and on its own lane address (``WorkerRuntime.binary_addresses``, reserved by the
supervisor). The handlers are the routed ones (workers/routing.py), so a frame naming a session
another worker holds answers the RESP side's ``ERR <command> session lives on worker N
<host:port>`` — with the owner's **binary-lane** address, where the client reconnects.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import socket
import ssl
from typing import TYPE_CHECKING, Any, cast

from pion.common.binary_frames import (
    COMMAND_NAMES, REQUEST_HEADER, STATUS_BY_CODE, STATUS_ERR, STATUS_OK, FrameError, encode_reply_header,
    parse_request_header, split_fields,
)
from pion.common.errors import CommandError, arity_error
from pion.server.commands.spec import CommandSpec
from pion.server.config import ServerConfig
from pion.server.context import ClientState, CommandContext
from pion.server.resp.replies import SimpleString
from pion.server.tls import tls_binary_port, tls_only

if TYPE_CHECKING:
    from pion.server.context import ServerState

log = logging.getLogger("pion.server.binary_lane")
_HEADER = REQUEST_HEADER.size
_REDIRECT = re.compile(r"(\S+ session lives on worker (\d+)) \S+")


class BinaryConnection(asyncio.Protocol):
    """One binary-lane client: frames in, handler calls, frames out (in request order)."""

    def __init__(self, lane: BinaryLane) -> None:
        self.lane = lane
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.client = ClientState(client_id=-1, authenticated=not lane.state.dispatcher.auth_required)
        self.ctx = CommandContext(server=lane.state, client=self.client)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.lane.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lane.connections.discard(self)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= _HEADER and self.transport is not None and not self.transport.is_closing():
            try:
                command, request_id, n_fields, body_len = parse_request_header(self.buf[:_HEADER])
                if body_len > self.lane.max_body:
                    raise FrameError(f"body of {body_len} bytes is over the {self.lane.max_body}-byte limit")
            except FrameError as exc:
                self._send(STATUS_ERR, 0, f"ERR Protocol error: {exc}".encode())
                self.transport.close()
                return
            if len(self.buf) < _HEADER + body_len:
                return
            body = bytes(self.buf[_HEADER:_HEADER + body_len])
            del self.buf[:_HEADER + body_len]
            try:
                fields = split_fields(body, n_fields)
            except FrameError as exc:
                self._send(STATUS_ERR, request_id, f"ERR Protocol error: {exc}".encode())
                self.transport.close()
                return
            status, payload = self.lane.execute(self.ctx, command, fields)
            self._send(status, request_id, payload)

    def _send(self, status: int, request_id: int, payload: bytes | memoryview) -> None:
        assert self.transport is not None
        self.transport.writelines([encode_reply_header(status, request_id, memoryview(payload).nbytes), payload])


class BinaryLane:
    """The listener and the command map of the binary lane."""

    def __init__(self, state: ServerState, specs: dict[str, CommandSpec]) -> None:
        self.state = state
        self.password = state.config.requirepass
        self.max_body = state.config.client_query_buffer_limit
        self.specs = {code: specs[name] for code, name in COMMAND_NAMES.items() if name in specs}
        self.connections: set[BinaryConnection] = set()
        self._starts: list[asyncio.Task[None]] = []
        self.servers: list[asyncio.AbstractServer] = []
        self.port = 0
        self.tls_port = 0

    def execute(self, ctx: CommandContext, command: int, fields: list[bytes]) -> tuple[int, bytes | memoryview]:
        """Run one frame's command; (status, reply body)."""
        name = COMMAND_NAMES.get(command)
        try:
            if name == "AUTH":
                return self._auth(ctx, fields)
            if not ctx.client.authenticated:
                raise CommandError("Authentication required.", code="NOAUTH")
            if name == "PING":
                return STATUS_OK, b"PONG"
            spec = self.specs.get(command)
            if spec is None:
                raise CommandError(f"unknown binary-lane command byte {command:#04x}")
            n_words = len(fields) + 1
            if (n_words != spec.arity) if spec.arity > 0 else (n_words < -spec.arity):
                raise arity_error(spec.name)
            self._check_tenant(ctx, spec, fields)
            return STATUS_OK, _body(spec.handler(ctx, fields))
        except CommandError as exc:
            return STATUS_BY_CODE.get(exc.code, STATUS_ERR), self._lane_redirect(exc).wire()
        except Exception:
            log.exception("binary-lane command %s failed", name)
            return STATUS_ERR, f"ERR internal error in '{name}'".encode()

    def _lane_redirect(self, exc: CommandError) -> CommandError:
        """A -w N redirect names the owner's RESP address; a lane client reconnects to the
        owner's lane, so name that instead (module docstring)."""
        runtime = self.state.worker
        if runtime is None or not runtime.binary_addresses or exc.code != "ERR":
            return exc
        match = _REDIRECT.fullmatch(exc.message)
        if match is None:
            return exc
        return CommandError(f"{match[1]} {runtime.binary_addresses[int(match[2])]}")

    def _check_tenant(self, ctx: CommandContext, spec: CommandSpec, fields: list[bytes]) -> None:
        """The RESP dispatcher's tenant check (server/tenants.py), for the lane's frames."""
        tenants = self.state.tenants
        if tenants is None or not tenants.enabled:
            return
        tenant = ctx.client.tenant or tenants.default_tenant
        if tenant is None:
            return
        access = spec.access
        message = ("this command has no access spec" if access is None
                   else access.refusal(tenant, spec.name.lower(), fields))
        if message is not None:
            raise CommandError(message, code="NOPERM")

    def _auth(self, ctx: CommandContext, fields: list[bytes]) -> tuple[int, bytes]:
        if len(fields) not in (1, 2):
            raise arity_error("auth")
        tenants = self.state.tenants
        if tenants is not None and tenants.by_name:
            try:
                ctx.client.tenant = tenants.authenticate(b"default" if len(fields) == 1 else fields[0], fields[-1])
            except LookupError:
                raise CommandError("invalid username-password pair or user is disabled.", code="WRONGPASS") from None
            ctx.client.authenticated = True
            return STATUS_OK, b"OK"
        if self.password is None:
            raise CommandError("AUTH <password> called without any password configured for the default user. "
                               "Are you sure your configuration is correct?")
        user_ok = len(fields) == 1 or fields[0] == b"default"
        if not (user_ok and hmac.compare_digest(fields[-1], self.password.encode())):
            raise CommandError("invalid username-password pair or user is disabled.", code="WRONGPASS")
        ctx.client.authenticated = True
        if tenants is not None:  # --ns-prefix: the default user stays confined
            ctx.client.tenant = tenants.default_tenant
        return STATUS_OK, b"OK"

    def listen(self) -> None:
        """Bind now (synchronously, so clients may connect as soon as the RESP port answers)."""
        cfg = self.state.config
        runtime = self.state.worker
        if plain_binary_lane(cfg):
            port = cfg.binary_port if cfg.binary_port > 0 else (cfg.port + 1 if cfg.port else 0)
            if runtime is not None and runtime.binary_addresses:  # -w N: ports the parent reserved
                self.port = self._bind(port, None, "binary lane", reuse_port=True)
                own = runtime.binary_addresses[runtime.worker_id]
                self._bind(own.port, None, f"binary lane of worker {runtime.worker_id}", reuse_port=True)
            elif runtime is None:
                self.port = self._bind(port, None, "binary lane")
        tls_port = tls_binary_port(cfg)
        if tls_port and self.state.tls is not None:
            self.tls_port = self._bind(tls_port, self.state.tls, "TLS binary lane")

    def _bind(self, port: int, tls: ssl.SSLContext | None, what: str, reuse_port: bool = False) -> int:
        """Bind one listener (plain or TLS); the bound port, or 0 when it cannot be bound.
        ``reuse_port``: join the SO_REUSEPORT group of ``-w N``'s workers."""
        bind = self.state.config.bind
        try:
            sock = socket.create_server((bind, port), backlog=511, reuse_port=reuse_port)
        except OSError as exc:
            log.warning("%s: cannot listen on %s:%d (%s); running without it", what, bind, port, exc)
            return 0
        sock.setblocking(False)
        loop = asyncio.get_running_loop()

        async def serve() -> None:
            self.servers.append(await loop.create_server(lambda: BinaryConnection(self), sock=sock, ssl=tls))

        self._starts.append(loop.create_task(serve()))
        bound = int(sock.getsockname()[1])
        log.info("%s listening on %s:%d", what, bind, bound)
        return bound

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        for server in self.servers:
            await server.wait_closed()


def _body(result: Any) -> bytes | memoryview:
    if isinstance(result, (bytes, memoryview)):
        return result
    if isinstance(result, SimpleString):
        return result.text.encode()
    return str(result).encode()


def plain_binary_lane(config: ServerConfig) -> bool:
    """Whether the plain binary lane opens: ``--binary-port N`` always, the default (port + 1)
    unless ``--binary-port 0`` or a TLS-only server (``tls.tls_only``)."""
    return config.binary_port > 0 or (config.binary_port < 0 and not tls_only(config))


def start_binary_lane(state: ServerState) -> BinaryLane | None:
    """Open the binary lane unless ``--binary-port 0`` (and no TLS lane) (``state.binary_lane``; main.serve
    starts it beside the RESP listener and closes it after)."""
    if not plain_binary_lane(state.config) and not tls_binary_port(state.config):
        return None
    specs = state.table.specs
    if state.cold_tier is not None:  # the cold tier's Stage-2 handlers in their sync variants
        specs = {**specs, **state.cold_tier.binary_specs}
    lane = BinaryLane(state, specs)
    lane.listen()
    return lane
