"""What a worker of ``pion-server -w N`` knows about its siblings (``ServerState.worker``).

Built by the supervisor for each forked worker: its number, every worker's own address, the
shared directory (None under ``--independent-workers``) and, lazily, one ``PeerLink`` per
sibling and user. A link logs in as the user whose requests it carries (``link_auth``): the admin
with ``--requirepass``, a tenant with its own credentials, so the receiving worker confines and
filters exactly as it would for that tenant's own connection. A single-process server (``-w 1``) has ``ServerState.worker = None`` and none of
this runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pion.server.workers.directory import Directory
from pion.server.workers.ghosts import SharedGhosts
from pion.server.workers.peer import PeerLink, SharedLink

if TYPE_CHECKING:
    from pion.server.tenants import Tenant

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
    # Each worker's own ATTEND binary-lane address (empty: the lane is off); binary_lane.py
    # names these in its redirects.
    binary_addresses: Sequence[WorkerAddress] = ()
    # --admission 2hit: the ghost list every worker shares (ghosts.py; None: not 2hit, or independent)
    ghosts: SharedGhosts | None = None
    # Links by (worker, user): None is the admin (or the --ns-prefix default user), else a tenant's name.
    peers: dict[tuple[int, str | None], PeerLink] = field(default_factory=dict)
    # Links to worker 0 for forwarded keyspace commands, shared by every client of one user,
    # by (RESP, db, user).
    keyspace_links: dict[tuple[int, int, str | None], SharedLink] = field(default_factory=dict)
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

    def link_auth(self, user: Tenant | None) -> list[bytes] | None:
        """The AUTH arguments of a link carrying ``user``'s requests (None: no AUTH needed).

        A tenant logs in with its own name and password; the admin — and the ``default`` user
        that ``--ns-prefix`` confines — with ``--requirepass``."""
        if user is not None and user.password:
            return [user.name.encode(), user.password]
        return None if self.password is None else [self.password.encode()]

    def peer(self, worker: int, user: Tenant | None = None) -> PeerLink:
        """The link to ``worker`` carrying ``user``'s requests (opened on first use)."""
        key = (worker, None if user is None else user.name)
        link = self.peers.get(key)
        if link is None:
            addr = self.addresses[worker]
            link = self.peers[key] = PeerLink(addr.host, addr.port, self.link_auth(user))
        return link

    def keyspace_link(self, protocol: int, db: int, user: Tenant | None = None) -> SharedLink:
        """The link to worker 0 that every client of ``user`` shares for forwarded commands."""
        key = (protocol, db, None if user is None else user.name)
        link = self.keyspace_links.get(key)
        if link is None:
            addr = self.addresses[0]
            link = self.keyspace_links[key] = SharedLink(addr.host, addr.port, self.link_auth(user),
                                                         protocol, db)
        return link

    async def broadcast(self, words: list[bytes], user: Tenant | None = None) -> dict[int, Any]:
        """Send ``words`` to every other worker at once, as ``user``; parsed replies (or the
        exception) by worker."""
        others = [w for w in range(self.n_workers) if w != self.worker_id]
        results = await asyncio.gather(*(self.peer(w, user).call_value(words) for w in others),
                                       return_exceptions=True)
        return dict(zip(others, results, strict=True))

    def close(self) -> None:
        for link in self.peers.values():
            link.close()
        for shared in self.keyspace_links.values():
            shared.close()
        self.peers.clear()
        self.keyspace_links.clear()
