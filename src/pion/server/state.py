"""Build one worker's typed state, start it and stop it — every part in one visible order.

``build_state(config)`` constructs the parts (nothing touches the data directory or a
socket yet); ``open_state(state)`` recovers the stores from ``--dir`` (raising
``RecoveryError`` on damage; ``main`` maps it to exit code 1), attaches the WAL to the
stores and to the network layer's reply path, and starts active expiry;
``close_state(state)`` undoes that after the listener has drained.
"""

from __future__ import annotations

import asyncio
import ssl
import time

from pion.server.coldtier.install import install_cold_tier
from pion.server.commands.table import build_table
from pion.server.config import ServerConfig
from pion.server.context import ServerState
from pion.server.dispatcher import Dispatcher
from pion.server.net import PionServer
from pion.server.persist import PersistOptions, Persistence
from pion.server.persist.binding import ReplyHooks, attach, make_sink
from pion.server.persist.wal import FsyncPolicy
from pion.server.admission import Admission
from pion.server.receipt import Receipt
from pion.server.semantic.embedder import MiniLMEmbedder
from pion.server.store.stores import Stores
from pion.server.tenants import TenantRegistry
from pion.server.workers.routing import install_directory_hooks, publish_all, route_table
from pion.server.workers.runtime import WorkerRuntime

WORKER_ID = 0  # the single-process server's files; -w N gives each worker its own (pion.vstore.<w>)


def build_state(config: ServerConfig, worker: WorkerRuntime | None = None,
                tls: ssl.SSLContext | None = None) -> ServerState:
    """The worker's parts, in dependency order: stores, receipt, embedder, persistence,
    command table (routed across the group under -w N) and dispatcher, network (``tls``: the
    TLS listeners' context, ``tls.py``)."""
    stores = Stores.make(max_sessions=config.max_sessions, maxmemory=config.maxmemory,
                         databases=config.databases, policy=config.maxmemory_policy,
                         samples=config.maxmemory_samples)
    receipt = Receipt(config.prefill_us_per_token)
    embedder = MiniLMEmbedder(threads=config.embed_threads or None)
    policy: FsyncPolicy = config.appendfsync  # type: ignore[assignment]  # validated by config
    worker_id = WORKER_ID if worker is None else worker.worker_id
    persist = Persistence(PersistOptions(config.data_dir, worker_id, policy, config.wal_max_bytes,
                                         config.wal_repair, config.appendonly))
    tenants = TenantRegistry(config.tenants, config.requirepass, config.ns_prefix, receipt)
    table = build_table()
    cold_tier = install_cold_tier(config, stores, receipt, table.specs)  # None without --cold-tier
    if worker is not None:
        route_table(table, worker, cold_tier.binary_specs if cold_tier is not None else None)
    dispatcher = Dispatcher(table.specs, config.requirepass, config.slowlog_log_slower_than_us,
                            config.slowlog_max_len, tenants=tenants)
    state = ServerState(config=config, started_at=time.time(), stores=stores, receipt=receipt,
                        embedder=embedder, persist=persist, table=table, dispatcher=dispatcher,
                        tenants=tenants, admission=Admission(config.admission, config.admission_window,
                                                            worker.ghosts if worker is not None else None),
                        worker=worker, cold_tier=cold_tier, tls=tls)
    state.network = PionServer(state, dispatcher)
    return state


def open_state(state: ServerState) -> None:
    """Recover, then log every mutation, then start active expiry (inside the running loop,
    before the listener opens). Raises RecoveryError when the data directory is damaged."""
    persist = state.persist
    search = state.stores.search
    search.defer_indexing()  # FT indexes are built once, in bulk, after the replay
    persist.recover(make_sink(state.stores))
    search.finish_deferred()
    if state.worker is not None:  # the directory learns what this worker recovered
        publish_all(state)
        install_directory_hooks(state)
    attach(state.stores, persist)
    if persist.appendonly:  # --appendonly no: no WAL, so no hooks and no write marks
        # Group commit per event-loop batch: small records are buffered and written (and
        # fsynced under always) once, before any reply of the batch leaves (net.py).
        persist.enable_batching()
        hooks = ReplyHooks(persist)  # (compiled: no Python frame per reply batch)
        state.network.before_reply.append(hooks.flush_batch)
        state.network.reply_pending.append(hooks.batch_pending)
        state.dispatcher.track_writes = True
    if state.cold_tier is not None:
        state.cold_tier.start()  # after the replay: replayed evictions are not demotions
    state.expiry_task = asyncio.get_running_loop().create_task(
        _expire_forever(state, 1.0 / state.config.hz))


async def _expire_forever(state: ServerState, interval_s: float) -> None:
    dbs = state.stores.dbs
    while True:
        await asyncio.sleep(interval_s)
        for keyspace in dbs:
            if keyspace.n_expires:
                keyspace.active_expire_cycle()


def close_state(state: ServerState) -> None:
    """Stop expiry, release the embedder, flush and close the WAL (after clients drained)."""
    if state.expiry_task is not None:
        state.expiry_task.cancel()
        state.expiry_task = None
    state.embedder.close()
    if state.worker is not None:
        state.worker.close()
    if state.cold_tier is not None:
        state.cold_tier.close()  # writes what write-behind still holds
    state.persist.close()
