"""What a worker of ``pion-server -w N`` knows about its siblings (``ServerState.worker``).

Built by the supervisor for each forked worker: its number, every worker's own address, the
shared directory (None under ``--independent-workers``) and, lazily, one ``PeerLink`` per
sibling. A single-process server (``-w 1``) has ``ServerState.worker = None`` and none of
this runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pion.server.workers.directory import Directory
from pion.server.workers.peer import PeerLink, SharedLink

log = logging.getLogger("pion.server.workers")


@dataclass(frozen=True, slots=True)
class WorkerAddress:
    """Where a client reaches one worker directly (its own listener)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class WorkerRuntime:
    """One worker's view of the group (see the module docstring)."""

    worker_id: int
    addresses: Sequence[WorkerAddress]
    directory: Directory | None
    password: str | None
    placement: str = "connection"  # where a new namespace goes: "connection" | "hash"
    peers: dict[int, PeerLink] = field(default_factory=dict)
    # Links to worker 0 for forwarded keyspace commands, shared by every client, by (RESP, db).
    keyspace_links: dict[tuple[int, int], SharedLink] = field(default_factory=dict)
    # Names this worker published, so eviction and shutdown can retract them cheaply.
    published: set[tuple[int, str]] = field(default_factory=set)

    @property
    def n_workers(self) -> int:
        return len(self.addresses)

    @property
    def independent(self) -> bool:
        return self.directory is None

    def address(self, worker: int) -> WorkerAddress:
        return self.addresses[worker]

    def peer(self, worker: int) -> PeerLink:
        link = self.peers.get(worker)
        if link is None:
            addr = self.addresses[worker]
            link = self.peers[worker] = PeerLink(addr.host, addr.port, self.password)
        return link

    def keyspace_link(self, protocol: int, db: int) -> SharedLink:
        link = self.keyspace_links.get((protocol, db))
        if link is None:
            addr = self.addresses[0]
            link = self.keyspace_links[(protocol, db)] = SharedLink(addr.host, addr.port, self.password,
                                                                     protocol, db)
        return link

    async def broadcast(self, words: list[bytes]) -> dict[int, Any]:
        """Send ``words`` to every other worker at once; parsed replies (or the exception) by worker."""
        others = [w for w in range(self.n_workers) if w != self.worker_id]
        results = await asyncio.gather(*(self.peer(w).call_value(words) for w in others),
                                       return_exceptions=True)
        return dict(zip(others, results, strict=True))

    def close(self) -> None:
        for link in self.peers.values():
            link.close()
        for shared in self.keyspace_links.values():
            shared.close()
        self.peers.clear()
        self.keyspace_links.clear()
