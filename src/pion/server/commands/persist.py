"""Persistence commands and start-up recovery.

  KV.PREFIX.SAVE [path]  -> +OK   snapshot to pion.vstore.<worker> (or a relative path inside --dir)
  SAVE                   -> +OK   the same, default path (Redis's name)
  BGSAVE [SCHEDULE]      -> +Background saving started   (snapshot without blocking other clients)
  LASTSAVE               -> :<unix time of the last successful snapshot>

``setup(state)`` runs after the store families (last in the table's module list):
it recovers the V-store, keyspace and semantic cache from ``--dir`` before the listener opens,
then attaches the journals (every mutation is logged before it is applied, large
records written at once, small ones buffered) and the server's ``before_reply`` hook
that writes the buffer — and fsyncs under ``--appendfsync always`` — once per batch,
before any reply of that batch is sent.
A damaged data directory stops start-up with the recovery error's message.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pion.common.errors import CommandError, clip_for_echo
from pion.server.commands.spec import CommandSpec
from pion.server.persist import PersistOptions, Persistence, RecoveryError
from pion.server.persist.binding import (
    EXPIRED_KEY_DELETE_KINDS,
    KEYSPACE_KINDS,
    VSTORE_KINDS,
    StoreJournal,
    expired_key_delete,
    make_sink,
    semantic_journal,
    snapshot_records,
)
from pion.server.persist.search_binding import search_journal
from pion.server.persist.ssm_binding import SSM_KINDS
from pion.server.persist.wal import FsyncPolicy
from pion.server.resp.replies import OK, SimpleString

if TYPE_CHECKING:
    from pion.server.context import CommandContext, ServerState

COMPONENT = "persist"
WORKER_ID = 0  # one worker per process in this build; -w N gives each worker its own files
log = logging.getLogger("pion.persist")


def persist_of(state: ServerState) -> Persistence:
    persist: Persistence | None = state.components.get(COMPONENT)
    if persist is None:
        raise CommandError("persistence is not running")
    return persist


def cmd_kvprefix_save(ctx: CommandContext, args: list[bytes]) -> object:
    if len(args) > 1:
        raise CommandError("syntax error: KV.PREFIX.SAVE takes at most one path")
    path = None
    if args:
        try:
            path = args[0].decode()
        except UnicodeDecodeError:
            raise CommandError(f"snapshot path is not valid UTF-8: '{clip_for_echo(args[0])}'") from None
        if "\x00" in path:  # the OS refuses it; say so instead of failing inside pathlib
            raise CommandError(f"snapshot path contains a NUL byte: '{clip_for_echo(args[0])}'")
    persist_of(ctx.server).save(path)
    return OK


def cmd_persist_save(ctx: CommandContext, args: list[bytes]) -> object:
    persist_of(ctx.server).save()
    return OK


def cmd_persist_bgsave(ctx: CommandContext, args: list[bytes]) -> object:
    # redis-py's bgsave() sends SCHEDULE: accepted, but a save already running is still
    # refused (nothing is queued behind it in this build).
    if len(args) > 1 or (args and args[0].upper() != b"SCHEDULE"):
        raise CommandError("syntax error: BGSAVE takes no arguments (or SCHEDULE) in this build")
    persist_of(ctx.server).start_bgsave()
    return SimpleString("Background saving started")


def cmd_persist_lastsave(ctx: CommandContext, args: list[bytes]) -> object:
    return persist_of(ctx.server).last_save_unix


def setup(state: ServerState) -> None:
    """Recover from --dir, then log every mutation from now on."""
    config = state.config
    vstore = state.components.get("vstore")
    keyspace = state.components.get("keyspace")
    semantic = state.components.get("semantic")  # AI.SEMANTIC_CACHE's SemanticCacheStore
    search = state.components.get("search")  # FT.*'s SearchStore
    ssm = state.components.get("ssm")  # SSM.PREFIX.*'s SsmStateStore
    policy: FsyncPolicy = config.appendfsync  # type: ignore[assignment]  # validated by config
    persist = Persistence(PersistOptions(config.data_dir, WORKER_ID, policy, config.wal_max_bytes,
                                         config.wal_repair))
    if search is not None:
        search.defer_indexing()  # FT indexes are built once, in bulk, after the replay
    try:
        persist.recover(make_sink(vstore, keyspace, semantic, search, ssm))
    except RecoveryError as e:
        log.error("%s", e)
        raise SystemExit(1) from None
    if search is not None:
        search.finish_deferred()
    if vstore is not None:
        vstore.journal = StoreJournal(persist, VSTORE_KINDS, "V-store")
    if keyspace is not None:
        keyspace.journal = StoreJournal(persist, KEYSPACE_KINDS, "keyspace",
                                        skip=expired_key_delete(keyspace),
                                        skip_kinds=EXPIRED_KEY_DELETE_KINDS)
    if ssm is not None:
        ssm.journal = StoreJournal(persist, SSM_KINDS, "SSM state")
    if semantic is not None:
        semantic.on_mutation = semantic_journal(persist)
        semantic.persisted = True
    if search is not None:
        search.on_mutation = search_journal(persist)
    persist.set_snapshot_source(lambda: snapshot_records(vstore, keyspace, semantic, search, ssm))
    server = state.components.get("server")
    if server is not None:
        # Group commit per event-loop batch: small records are buffered and written (and
        # fsynced under always) once, before any reply of the batch leaves (net.py).
        persist.enable_batching()
        server.before_reply.append(persist.flush_batch)
        server.reply_pending.append(persist.batch_pending)
        server.dispatcher.track_writes = True
    state.components[COMPONENT] = persist
    log.info("persistence: data in %s, appendfsync %s, WAL %d bytes", config.data_dir, policy, persist.wal_bytes)


def shutdown(state: ServerState) -> None:
    persist = state.components.pop(COMPONENT, None)
    if persist is not None:
        persist.close()


def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    persist = state.components.get(COMPONENT)
    if persist is None:
        return {}
    return {"Persistence": [("loading", 0), *persist.info().items()]}


_ADMIN = frozenset({"admin"})
COMMANDS: list[CommandSpec] = [
    CommandSpec("KV.PREFIX.SAVE", -1, cmd_kvprefix_save, _ADMIN,
                "snapshot the V-store and keyspace, then truncate the WAL"),
    CommandSpec("SAVE", 1, cmd_persist_save, _ADMIN, "Synchronously save the dataset to disk"),
    CommandSpec("BGSAVE", -1, cmd_persist_bgsave, _ADMIN, "Asynchronously save the dataset to disk"),
    CommandSpec("LASTSAVE", 1, cmd_persist_lastsave, frozenset({"fast"}),
                "Unix time of the last successful save"),
]
