"""A blocking client for the binary fast lane (``pion.common.binary_frames``).

Each call is one scatter-gather ``sendmsg`` of header + fields (Q and the local K/V are sent
from their numpy buffers without copying) and one reply read. ``STATUS_COLDMISS`` raises
``ColdMissError`` like ``-COLDMISS`` does on RESP; any other error raises ``BinaryLaneError``.
Not thread-safe: one per PionPromptCache.

Under ``pion-server -w N`` a frame naming a session another worker holds is answered with
``ERR <command> session lives on worker N <host:port>`` naming the owner's *lane* address. With
``follow_redirects=True`` (the default) the client connects there (same password, TLS context
and timeouts), sends the frame again once, and remembers the owner of that session (the frame's
first field: the ATTEND session id, or KV.PREFIX.WARM's namespace) so its next frames go there
directly — redis-py's cluster client does the same with ``-MOVED``. A second redirect in a row
is raised. ``redirects`` counts the redirects followed. ``follow_redirects=False`` raises the
redirect as a ``BinaryLaneError`` (``pion.client.redirect.parse_redirect`` reads it).
"""

from __future__ import annotations

import itertools
import socket
import ssl
from collections import OrderedDict
from typing import Any

import numpy as np

from pion.client.redirect import parse_redirect
from pion.client.stage2.wire import ColdMissError
from pion.common.binary_frames import (
    CMD_ATTEND_PREFIX_QUERY_FUSED, CMD_AUTH, CMD_PING, REPLY_HEADER, STATUS_COLDMISS, STATUS_ERR, STATUS_OK,
    encode_request, parse_reply_header,
)

MAX_REMEMBERED_OWNERS = 4096  # sessions whose owner worker is remembered (oldest forgotten first)
_NO_SESSION = (CMD_AUTH, CMD_PING)  # frames whose first field is not a session name


class BinaryLaneError(RuntimeError):
    """The binary lane refused a request (the server's error text), or spoke something else."""


class _LaneSocket:
    """One connection to one lane address; PINGs (and AUTHs) on construction, raises if that fails."""

    def __init__(self, host: str, port: int, password: str | None, timeout_s: float, connect_timeout_s: float,
                 tls: ssl.SSLContext | None) -> None:
        sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                sock = tls.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError):
                sock.close()
                raise
        self.sock = sock
        self.sock.settimeout(timeout_s)
        self._scatter = tls is None  # an SSLSocket has no sendmsg
        self._ids = itertools.count(1)
        try:
            if password is not None:
                self._ok(*self.exchange(CMD_AUTH, [password.encode()]))
            if self._ok(*self.exchange(CMD_PING, [])) != b"PONG":
                raise BinaryLaneError("binary lane did not answer PING with PONG")
        except (OSError, BinaryLaneError):
            self.sock.close()
            raise

    def exchange(self, command: int, fields: list[Any]) -> tuple[int, bytes]:
        """Send one request; return the reply's status and body (no status check)."""
        request_id = next(self._ids) & 0xFFFFFFFF
        parts = encode_request(command, request_id, fields)
        total = sum(memoryview(p).nbytes for p in parts)
        sent = self.sock.sendmsg(parts) if self._scatter else 0
        if sent < total:  # a short scatter-gather write: send the rest plainly
            self.sock.sendall(b"".join(bytes(p) for p in parts)[sent:])
        status, reply_id, body_len = parse_reply_header(self._read(REPLY_HEADER.size))
        body = self._read(body_len)
        if reply_id != request_id:
            raise BinaryLaneError(f"reply to request {reply_id} while waiting for {request_id}")
        return status, body

    @staticmethod
    def _ok(status: int, body: bytes) -> bytes:
        if status == STATUS_COLDMISS:
            raise ColdMissError(body.decode(errors="replace"))
        if status != STATUS_OK:
            raise BinaryLaneError(body.decode(errors="replace"))
        return body

    def _read(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise BinaryLaneError("binary lane closed the connection")
            got += k
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


class BinaryLaneClient:
    """A connection to the binary lane (plus one per owner worker a redirect named, opened on demand).

    ``tls``: a client ``SSLContext`` for the server's TLS binary lane (``--tls-binary-port``);
    the handshake checks the server's certificate against ``host`` unless the context says not to.
    ``follow_redirects``: follow a ``-w N`` worker's redirect once per frame (module docstring).
    """

    def __init__(self, host: str, port: int, password: str | None = None, timeout_s: float = 30.0,
                 connect_timeout_s: float = 2.0, tls: ssl.SSLContext | None = None,
                 follow_redirects: bool = True) -> None:
        self._settings = (password, timeout_s, connect_timeout_s, tls)
        self._home = _LaneSocket(host, port, *self._settings)
        self.sock = self._home.sock
        self.follow_redirects = follow_redirects
        self.redirects = 0
        self._peers: dict[tuple[str, int], _LaneSocket] = {}
        self._owners: OrderedDict[bytes, tuple[str, int]] = OrderedDict()

    def call(self, command: int, fields: list[Any]) -> bytes:
        """Send one request and return the OK reply body; raises on an error status."""
        session = None if command in _NO_SESSION or not fields else bytes(fields[0])
        owner = self._owners.get(session) if session is not None else None
        status, body = self._home.exchange(command, fields) if owner is None else self._on_peer(owner, command, fields)
        if status == STATUS_ERR and self.follow_redirects and session is not None:
            target = parse_redirect(body.decode(errors="replace"))
            if target is not None:
                address = (target.host, target.port)
                self.redirects += 1
                status, body = self._on_peer(address, command, fields)
                self._remember(session, address)
        return _LaneSocket._ok(status, body)

    def owner_of(self, session: str) -> tuple[str, int] | None:
        """The lane address remembered for ``session`` after a redirect (None: the first address)."""
        return self._owners.get(session.encode())

    def query_fused(self, sid: str, layer: int, q: np.ndarray, k_loc: np.ndarray, v_loc: np.ndarray) -> bytes:
        """ATTEND.PREFIX.QUERY_FUSED with the standard head grouping (see ``wire.query_fused``)."""
        h_q, _, d = q.shape
        h_kv, s, _ = k_loc.shape
        fields = [sid.encode(), b"%d" % layer, b"%d" % h_q, b"%d" % d, b"%d" % s, b"%d" % h_kv,
                  q.data.cast("B"), k_loc.data.cast("B"), v_loc.data.cast("B"), b""]
        return self.call(CMD_ATTEND_PREFIX_QUERY_FUSED, fields)

    def _on_peer(self, address: tuple[str, int], command: int, fields: list[Any]) -> tuple[int, bytes]:
        """One exchange with the owner at ``address`` (connected on first use). A connection that
        fails is closed and forgotten, so the next frame reconnects (a restarted worker keeps its
        address)."""
        lane = self._peers.get(address)
        try:
            if lane is None:
                lane = self._peers[address] = _LaneSocket(address[0], address[1], *self._settings)
            return lane.exchange(command, fields)
        except (OSError, BinaryLaneError) as exc:
            dropped = self._peers.pop(address, None)
            if dropped is not None:
                dropped.close()
            raise BinaryLaneError(f"the owner's binary lane at {address[0]}:{address[1]} failed ({exc})") from exc

    def _remember(self, session: bytes, address: tuple[str, int]) -> None:
        self._owners[session] = address
        self._owners.move_to_end(session)
        while len(self._owners) > MAX_REMEMBERED_OWNERS:
            self._owners.popitem(last=False)

    def close(self) -> None:
        self._home.close()
        for lane in self._peers.values():
            lane.close()
        self._peers.clear()

