"""State a command handler sees: the server's shared state and the calling client's.

No process-global singletons: one ``ServerState`` per worker process, built once by
``pion.server.state.build_state`` and passed down. Its attributes are the worker's
parts, each typed, in the order they are built:

  ``stores``   the V-store, keyspace, semantic cache, FT.* indexes and SSM state
               (``store/stores.py``)
  ``receipt``  PION.STATS counters (``receipt.py``)
  ``embedder`` the server-side MiniLM for AI.EMBED / AI.SEMANTIC_CACHE (loaded on first use)
  ``persist``  WAL + snapshots + recovery (``persist/manager.py``)
  ``table``    the joined command table; ``dispatcher`` runs it
  ``network``  the listener and its connections (``net.py``)
  ``binary_lane`` the ATTEND binary lane (``binary_lane.py``), opened beside the listener
               unless ``--binary-port 0``
  ``worker``   under ``-w N``: this worker's number, its siblings' addresses and the shared
               directory (``workers/runtime.py``); None for the single-process server
  ``tls``      the server SSLContext of the TLS listeners (``tls.py``), None without ``--tls-port``
  ``metrics``  the Prometheus endpoint (``metrics.py``), None without ``--metrics-port``

A command family reads what it needs from these (``ctx.server.stores.keyspace``...);
nothing is created on first use, and nothing is looked up by name.

This module is compiled with mypyc (``pion/_compiled.py``), so ``ctx.client``,
``ctx.server.stores`` and the ``ClientState`` fields are native attribute reads in the
compiled handlers. ``ServerState`` is a plain class for
that reason (its docstring says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    import ssl

    from pion.server.coldtier.bridge import ColdBridge
    from pion.server.commands.table import CommandTable
    from pion.server.config import ServerConfig
    from pion.server.dispatcher import Dispatcher
    from pion.server.metrics import MetricsEndpoint
    from pion.server.binary_lane import BinaryLane
    from pion.server.net import PionServer
    from pion.server.persist.manager import Persistence
    from pion.server.receipt import Receipt
    from pion.server.semantic.embedder import MiniLMEmbedder
    from pion.server.store.stores import Stores
    from pion.server.tenants import Tenant, TenantRegistry
    from pion.server.admission import Admission
    from pion.server.workers.runtime import WorkerRuntime


@dataclass
class ClientState:
    """Per-connection state."""

    client_id: int
    addr: str = ""
    name: str = ""
    protocol: int = 2
    authenticated: bool = False
    lib_name: str = ""
    lib_ver: str = ""
    db: int = 0
    created_at: float = 0.0
    last_command: str = ""
    close_after_reply: bool = False  # set by QUIT: the connection closes once the reply is sent
    # (start, end) slices of the connection's unsent reply list holding write commands'
    # replies: turned into -MISCONF if the WAL batch they depend on cannot be written.
    write_marks: list[tuple[int, int]] = field(default_factory=list)
    # The tenant this connection is confined to (server/tenants.py); None = the admin.
    tenant: Tenant | None = None


class ServerState:
    """Everything shared by all connections of one worker (see the module docstring).

    A plain class, not a dataclass: a compiled (mypyc) dataclass builds ``__annotations__``
    from its field types when the module is imported, and most of these types can only be
    imported under ``TYPE_CHECKING`` here (circular imports) — ``KeyError`` at start-up. With
    an explicit ``__init__`` the fields are typed native attributes all the same.
    """

    config: ServerConfig
    started_at: float
    stores: Stores
    receipt: Receipt
    embedder: MiniLMEmbedder
    persist: Persistence
    table: CommandTable
    dispatcher: Dispatcher
    network: PionServer  # set by build_state: it needs the state itself
    binary_lane: BinaryLane | None  # opened with the listener (main.serve)
    expiry_task: asyncio.Task[None] | None  # the keyspace's active expiry, once started
    tenants: TenantRegistry | None  # --tenant / --ns-prefix users (server/tenants.py)
    admission: Admission | None  # --admission policy and ghost list (server/admission.py)
    worker: WorkerRuntime | None  # -w N only (workers/runtime.py)
    cold_tier: ColdBridge | None  # --cold-tier: the shared cold tier (server/coldtier/)
    tls: ssl.SSLContext | None  # TLS listeners' context (tls.py), set by build_state
    metrics: MetricsEndpoint | None  # --metrics-port's HTTP listener (metrics.py), opened by main.serve

    def __init__(self, config: ServerConfig, started_at: float, stores: Stores, receipt: Receipt,
                 embedder: MiniLMEmbedder, persist: Persistence, table: CommandTable,
                 dispatcher: Dispatcher, binary_lane: BinaryLane | None = None,
                 expiry_task: asyncio.Task[None] | None = None,
                 tenants: TenantRegistry | None = None, admission: Admission | None = None,
                 worker: WorkerRuntime | None = None, cold_tier: ColdBridge | None = None,
                 tls: ssl.SSLContext | None = None, metrics: MetricsEndpoint | None = None) -> None:
        self.config = config
        self.started_at = started_at
        self.stores = stores
        self.receipt = receipt
        self.embedder = embedder
        self.persist = persist
        self.table = table
        self.dispatcher = dispatcher
        self.binary_lane = binary_lane
        self.expiry_task = expiry_task
        self.tenants = tenants
        self.admission = admission
        self.worker = worker
        self.cold_tier = cold_tier
        self.tls = tls
        self.metrics = metrics

    def __repr__(self) -> str:
        return f"ServerState(config={self.config!r}, started_at={self.started_at!r})"


@dataclass
class CommandContext:
    """What a handler gets: the shared server state and the calling client's state."""

    server: ServerState
    client: ClientState
