"""One worker's connection to another worker's own address (``pion-server -w N``).

Used for what one worker cannot answer alone: keyspace commands forwarded to worker 0
(``SharedLink``: one connection all clients share, per RESP version and SELECTed db, batching
the requests of a loop iteration into one write), and SAVE / FLUSHALL / PION.STATS ALL /
V.LIST / DROP sent to every other worker (``PeerLink``). A link names itself ``pion-worker-peer`` (CLIENT SETNAME) so the worker
it talks to runs what it receives locally instead of forwarding or broadcasting it again.

A link logs in as the user it carries requests for (``auth``: the arguments of its AUTH): the
admin's links with ``--requirepass``, a tenant's with the tenant's own name and password. So the
worker at the other end applies that user's access check and shows that user's listings
(KEYS/SCAN/DBSIZE/V.LIST/PION.STATS filtered by the tenant's prefix) with no trust in the link
beyond the credentials any client would present (docs/security.md, "Tenants and workers").

``call(words)`` sends one request and returns the raw reply bytes (``reply_scan`` finds
where it ends); ``call_value(words)`` parses them with hiredis for the caller's own use. A
broken connection raises ``ConnectionError`` and the next call reconnects.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import hiredis

from pion.server.resp.framing import encode_words
from pion.server.resp.reply_scan import reply_end

PEER_NAME = b"pion-worker-peer"
READ_CHUNK = 256 * 1024
# A SharedLink writes what it holds once this many requests wait, without waiting for the end
# of the loop iteration: worker 0 starts on a large batch (many clients' pipelines) while this
# worker still adds to it, instead of the two taking turns on one huge batch.
LINK_FLUSH_EVERY = 64


class PeerLink:
    """A lazily opened, reconnecting RESP connection to one worker."""

    def __init__(self, host: str, port: int, auth: list[bytes] | None, connect_timeout_s: float = 5.0) -> None:
        self.host = host
        self.port = port
        self.auth = auth
        self.connect_timeout_s = connect_timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._buf = bytearray()
        self._lock = asyncio.Lock()
        self.protocol = 2
        self.db = 0

    async def _open(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=READ_CHUNK), self.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"worker at {self.host}:{self.port} is not reachable: {exc}") from exc
        self._buf.clear()
        self.protocol, self.db = 2, 0
        hello: list[bytes] = []
        if self.auth is not None:
            hello.append(encode_words([b"AUTH", *self.auth]))
        hello.append(encode_words([b"CLIENT", b"SETNAME", PEER_NAME]))
        await self._roundtrip(b"".join(hello), len(hello))

    async def _roundtrip(self, data: bytes, n_replies: int) -> list[bytes]:
        assert self._writer is not None and self._reader is not None
        self._writer.write(data)
        replies: list[bytes] = []
        try:
            await self._writer.drain()
            while len(replies) < n_replies:
                end = reply_end(self._buf, 0)
                if end is None:
                    chunk = await self._reader.read(READ_CHUNK)
                    if not chunk:
                        raise ConnectionError(f"worker at {self.host}:{self.port} closed the connection")
                    self._buf += chunk
                    continue
                replies.append(bytes(self._buf[:end]))
                del self._buf[:end]
        except (OSError, ConnectionError) as exc:
            self.close()
            raise ConnectionError(f"worker at {self.host}:{self.port}: {exc}") from exc
        return replies

    async def call(self, words: list[bytes], protocol: int = 2, db: int = 0) -> bytes:
        """Send one request (after HELLO/SELECT when the caller's protocol or db differ);
        returns its raw reply."""
        async with self._lock:
            if self._writer is None:
                await self._open()
            prelude: list[bytes] = []
            if protocol != self.protocol:
                prelude.append(encode_words([b"HELLO", str(protocol).encode()]))
            if db != self.db:
                prelude.append(encode_words([b"SELECT", str(db).encode()]))
            replies = await self._roundtrip(b"".join(prelude) + encode_words(words), len(prelude) + 1)
            self.protocol, self.db = protocol, db
            return replies[-1]

    async def call_value(self, words: list[bytes]) -> Any:
        """Send one request over RESP2 and return the parsed reply (a ReplyError for -ERR)."""
        raw = await self.call(words)
        reader = hiredis.Reader()
        reader.feed(raw)
        return reader.gets()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._buf.clear()


class SharedLink:
    """One connection to worker 0 that every client of this worker shares for forwarded keyspace
    commands (one per RESP version, db and user, which travel with a request).

    Requests from all clients served in one loop iteration go out in one write, and worker 0
    answers them in one batch: the per-command cost of forwarding is a future and a share of
    two syscalls instead of a round trip of its own. Replies come back in request order; a
    client's requests reach ``call`` in its own order (the network layer starts a pipelined run of
    them in one loop turn, ``net.py`` ``_forward_batch``), so its own order holds. A broken
    connection fails every waiting request with ``ConnectionError`` and the next request
    reconnects.
    """

    def __init__(self, host: str, port: int, auth: list[bytes] | None, protocol: int, db: int,
                 connect_timeout_s: float = 5.0) -> None:
        self.host, self.port, self.auth = host, port, auth
        self.protocol, self.db = protocol, db
        self.connect_timeout_s = connect_timeout_s
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiters: collections.deque[asyncio.Future[bytes]] = collections.deque()
        self._pending: list[bytes] = []
        self._opening = asyncio.Lock()

    async def call(self, words: list[bytes]) -> bytes:
        """Send one request with the others of this loop iteration; its raw reply."""
        if self._writer is None:
            async with self._opening:
                if self._writer is None:
                    await self._open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append(encode_words(words))
        self._waiters.append(future)
        if len(self._pending) >= LINK_FLUSH_EVERY:
            self._flush()
        return await future

    async def _open(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=READ_CHUNK), self.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"worker at {self.host}:{self.port} is not reachable: {exc}") from exc
        hello: list[list[bytes]] = []
        if self.auth is not None:
            hello.append([b"AUTH", *self.auth])
        hello.append([b"CLIENT", b"SETNAME", PEER_NAME])
        if self.protocol != 2:
            hello.append([b"HELLO", str(self.protocol).encode()])
        if self.db:
            hello.append([b"SELECT", str(self.db).encode()])
        writer.write(b"".join(encode_words(w) for w in hello))
        buf = bytearray()
        try:
            for _ in hello:  # the handshake's replies are not the clients'
                while (end := reply_end(buf, 0)) is None:
                    chunk = await reader.read(READ_CHUNK)
                    if not chunk:
                        raise ConnectionError(f"worker at {self.host}:{self.port} closed the connection")
                    buf += chunk
                del buf[:end]
        except (OSError, ConnectionError) as exc:
            writer.close()
            raise ConnectionError(f"worker at {self.host}:{self.port}: {exc}") from exc
        self._writer = writer
        self._reader_task = asyncio.get_running_loop().create_task(self._read_replies(reader, buf))

    def _flush(self) -> None:
        if self._writer is not None and self._pending:
            self._writer.write(b"".join(self._pending))
        self._pending.clear()

    async def _read_replies(self, reader: asyncio.StreamReader, buf: bytearray) -> None:
        try:
            while True:
                while self._waiters and (end := reply_end(buf, 0)) is not None:
                    future = self._waiters.popleft()
                    if not future.done():  # (a client that went away: its reply is dropped)
                        future.set_result(bytes(buf[:end]))
                    del buf[:end]
                chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    raise ConnectionError("closed the connection")
                buf += chunk
        except (OSError, ConnectionError) as exc:
            self._fail(ConnectionError(f"worker at {self.host}:{self.port}: {exc}"))

    def _fail(self, error: ConnectionError) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._pending.clear()
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                future.set_exception(error)

    def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            self._reader_task = None
        self._fail(ConnectionError("link closed"))
