"""One worker's connection to another worker's own address (``pion-server -w N``).

Used for what one worker cannot answer alone: keyspace commands forwarded to worker 0 (one
link per client connection, so the client's RESP version and SELECTed db travel with it and
its commands stay in order), and SAVE / FLUSHALL / PION.STATS ALL / V.LIST / DROP sent to
every other worker. A link names itself ``pion-worker-peer`` (CLIENT SETNAME) so the worker
it talks to runs what it receives locally instead of forwarding or broadcasting it again.

``call(words)`` sends one request and returns the raw reply bytes (``reply_scan`` finds
where it ends); ``call_value(words)`` parses them with hiredis for the caller's own use. A
broken connection raises ``ConnectionError`` and the next call reconnects.
"""

from __future__ import annotations

import asyncio
from typing import Any

import hiredis

from pion.server.resp.framing import encode_words
from pion.server.resp.reply_scan import reply_end

PEER_NAME = b"pion-worker-peer"
READ_CHUNK = 256 * 1024


class PeerLink:
    """A lazily opened, reconnecting RESP connection to one worker."""

    def __init__(self, host: str, port: int, password: str | None, connect_timeout_s: float = 5.0) -> None:
        self.host = host
        self.port = port
        self.password = password
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
        if self.password is not None:
            hello.append(encode_words([b"AUTH", self.password.encode()]))
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
