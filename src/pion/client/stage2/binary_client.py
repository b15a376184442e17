"""A blocking client for the binary fast lane (``pion.common.binary_frames``), one socket.

Each call is one scatter-gather ``sendmsg`` of header + fields (Q and the local K/V are sent
from their numpy buffers without copying) and one reply read. ``STATUS_COLDMISS`` raises
``ColdMissError`` like ``-COLDMISS`` does on RESP; any other error raises ``BinaryLaneError``.
Not thread-safe: one per PionPromptCache.
"""

from __future__ import annotations

import itertools
import socket
import ssl
from typing import Any

import numpy as np

from pion.client.stage2.wire import ColdMissError
from pion.common.binary_frames import (
    CMD_ATTEND_PREFIX_QUERY_FUSED, CMD_AUTH, CMD_PING, REPLY_HEADER, STATUS_COLDMISS, STATUS_OK, encode_request,
    parse_reply_header,
)


class BinaryLaneError(RuntimeError):
    """The binary lane refused a request (the server's error text), or spoke something else."""


class BinaryLaneClient:
    """A connection to the binary lane; PINGs (and AUTHs) on construction, raises if that fails.

    ``tls``: a client ``SSLContext`` for the server's TLS binary lane (``--tls-binary-port``);
    the handshake checks the server's certificate against ``host`` unless the context says not to.
    """

    def __init__(self, host: str, port: int, password: str | None = None, timeout_s: float = 30.0,
                 connect_timeout_s: float = 2.0, tls: ssl.SSLContext | None = None) -> None:
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
                self.call(CMD_AUTH, [password.encode()])
            if self.call(CMD_PING, []) != b"PONG":
                raise BinaryLaneError("binary lane did not answer PING with PONG")
        except (OSError, BinaryLaneError):
            self.sock.close()
            raise

    def call(self, command: int, fields: list[Any]) -> bytes:
        """Send one request and return the OK reply body; raises on an error status."""
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
        if status == STATUS_COLDMISS:
            raise ColdMissError(body.decode(errors="replace"))
        if status != STATUS_OK:
            raise BinaryLaneError(body.decode(errors="replace"))
        return body

    def query_fused(self, sid: str, layer: int, q: np.ndarray, k_loc: np.ndarray, v_loc: np.ndarray) -> bytes:
        """ATTEND.PREFIX.QUERY_FUSED with the standard head grouping (see ``wire.query_fused``)."""
        h_q, _, d = q.shape
        h_kv, s, _ = k_loc.shape
        fields = [sid.encode(), b"%d" % layer, b"%d" % h_q, b"%d" % d, b"%d" % s, b"%d" % h_kv,
                  q.data.cast("B"), k_loc.data.cast("B"), v_loc.data.cast("B"), b""]
        return self.call(CMD_ATTEND_PREFIX_QUERY_FUSED, fields)

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
