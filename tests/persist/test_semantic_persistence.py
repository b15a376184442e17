"""AI.SEMANTIC_CACHE entries survive restarts through the WAL and snapshots.

Every SET passes VECTOR, so neither the tests nor replay ever load the embedding
model (checked through INFO's ``embedder_loaded``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import redis

from pion.server.persist.binding import make_sink, snapshot_fields
from pion.server.persist.records import HEADER_SIZE, RecordType, decode_fields, frame_bytes
from pion.server.search.store import SearchStore
from pion.server.semantic.cache import SemanticCacheStore
from pion.server.store.attend_slots import AttendSlots
from pion.server.store.keyspace import Keyspace
from pion.server.store.records import Record, SemanticDel, SemanticSet
from pion.server.store.ssm import SsmStateStore
from pion.server.store.stores import Stores
from pion.server.store.vstore import VStore
from support.procs import ServerProcess, start_server

DIM = 8


def _vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _blob(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype="<f4").tobytes()


def _cache(r: redis.Redis, *args: object) -> object:
    return r.execute_command("AI.SEMANTIC_CACHE", *args)


def _fill(r: redis.Redis) -> dict[str, int]:
    """Entries in two caches and scopes, with META and TTL; one deleted, one cache flushed."""
    ids = {
        "a": _cache(r, "SET", "faq", "s1", "reset password", "Use 'Forgot password'.", "VECTOR", _blob(_vec(1)),
                    "META", '{"q": "reset password"}'),
        "b": _cache(r, "SET", "faq", "s1", "opening hours", b"9-17\x00\xff", "VECTOR", _blob(_vec(2)),
                    "TTL", 3600),
        "c": _cache(r, "SET", "faq", "s2", "reset password", "other scope", "VECTOR", _blob(_vec(1))),
        "gone": _cache(r, "SET", "faq", "s1", "deleted one", "x", "VECTOR", _blob(_vec(3))),
        "flushed": _cache(r, "SET", "tmp", "s", "flushed", "y", "VECTOR", _blob(_vec(4))),
    }
    assert _cache(r, "DEL", "faq", ids["gone"], 999) == 1
    assert _cache(r, "FLUSH", "tmp") == 1
    return ids


def _lookups(r: redis.Redis) -> list[object]:
    """What clients can read back: replies to GETs near each stored vector, plus INFO entries."""
    queries = [("faq", "s1", 1), ("faq", "s1", 2), ("faq", "s2", 1), ("faq", "s1", 3), ("tmp", "s", 4)]
    replies: list[object] = []
    for cache, scope, seed in queries:
        near = _vec(seed) + 0.05 * _vec(seed + 100)
        replies.append(_cache(r, "GET", cache, scope, "q", "VECTOR", _blob(near), "THRESHOLD", "0.99"))
    for cache in ("faq", "tmp"):
        info = _cache(r, "INFO", cache)
        replies.append(dict(zip(info[::2], info[1::2], strict=True))[b"entries"])
    return replies


def _info(r: redis.Redis, section: str) -> dict[str, object]:
    return r.info(section)  # type: ignore[return-value]


def _restart(server: ServerProcess, *, kill: bool = False) -> ServerProcess:
    if kill:
        server.kill9()
    else:
        assert server.stop() == 0
    return start_server(server.data_dir, *server.extra_args, port=server.port)


def test_entries_del_and_flush_survive_a_restart_with_the_same_replies(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        r = server.client()
        ids = _fill(r)
        before = _lookups(r)
        assert before[0][0] == b"Use 'Forgot password'."
        assert (before[0][2], before[0][3]) == (ids["a"], b'{"q": "reset password"}')
        assert (before[3], before[4], before[5], before[6]) == (None, None, 3, 0)
        server = _restart(server)
        r = server.client()
        assert _lookups(r) == before
        # Ids are not reused after a restart: the next one follows the deleted one.
        assert _cache(r, "SET", "faq", "s1", "new", "n", "VECTOR", _blob(_vec(5))) == ids["gone"] + 1
        assert _info(r, "semantic")["embedder_loaded"] == 0
        info = _cache(r, "INFO", "faq")
        assert dict(zip(info[::2], info[1::2], strict=True))[b"persisted"] == 1
    finally:
        server.stop()


def test_bad_input_is_refused_and_nothing_is_logged(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        r = server.client()
        seq = _info(r, "persistence")["wal_last_seq"]
        for args in (("SET", "c", "s", "t", "r", "VECTOR", b"abc"), ("SET", "c", "s", "t", "r", "TTL", "-1"),
                     ("SET", "c", "s", "t", "r", "META", "{bad"), ("DEL", "c", "x"), ("DEL", "c", 1),
                     ("FLUSH", "c")):
            try:
                _cache(r, *args)
            except redis.ResponseError:
                pass
        assert _cache(r, "GET", "c", "s", "t", "VECTOR", _blob(_vec(1))) is None
        assert _info(r, "persistence")["wal_last_seq"] == seq
    finally:
        server.stop()


def test_ttl_deadline_is_absolute_across_a_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        r = server.client()
        set_at = time.time()
        _cache(r, "SET", "c", "s", "short", "soon gone", "VECTOR", _blob(_vec(1)), "TTL", 8)
        _cache(r, "SET", "c", "s", "long", "stays", "VECTOR", _blob(_vec(2)), "TTL", 3600)
        time.sleep(0.5)  # a deadline restarted at replay would now end >= 0.5 s later than the real one
        server = _restart(server)
        r = server.client()
        if time.time() < set_at + 7.5:  # (a restart on a very busy machine can take longer)
            assert _cache(r, "GET", "c", "s", "q", "VECTOR", _blob(_vec(1)))[0] == b"soon gone"
        time.sleep(max(0.0, set_at + 8.2 - time.time()))
        assert _cache(r, "GET", "c", "s", "q", "VECTOR", _blob(_vec(1)), "THRESHOLD", "0.99") is None
        assert _cache(r, "GET", "c", "s", "q", "VECTOR", _blob(_vec(2)))[0] == b"stays"
    finally:
        server.stop()


def test_entries_survive_save_and_restart_from_the_snapshot_plus_wal_tail(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        r = server.client()
        _fill(r)
        assert r.execute_command("SAVE") is True
        assert _info(r, "persistence")["wal_bytes"] == 0
        _cache(r, "SET", "faq", "s1", "after save", "tail", "VECTOR", _blob(_vec(3)))
        before = _lookups(r)
        assert before[3][0] == b"tail"
        server = _restart(server)
        r = server.client()
        assert _lookups(r) == before
        # Snapshot alone (WAL empty after a second SAVE), then a BGSAVE-written one.
        r.execute_command("SAVE")
        server = _restart(server)
        r = server.client()
        assert _lookups(r) == before
        r.execute_command("BGSAVE")
        deadline = time.monotonic() + 10
        while _info(r, "persistence")["bgsave_in_progress"] and time.monotonic() < deadline:
            time.sleep(0.05)
        server = _restart(server, kill=True)
        assert _lookups(server.client()) == before
    finally:
        server.stop()


def test_an_acknowledged_set_is_present_after_kill_9_under_appendfsync_always(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        r = server.client()
        eid = _cache(r, "SET", "c", "s", "q", "acknowledged", "VECTOR", _blob(_vec(7)), "META", "[1]")
        info = _info(r, "persistence")
        assert info["wal_synced_seq"] == info["wal_last_seq"]  # the reply came after the fsync
        seq = info["wal_last_seq"]
        assert _cache(r, "GET", "c", "s", "q", "VECTOR", _blob(_vec(7)))[0] == b"acknowledged"
        assert _info(r, "persistence")["wal_last_seq"] == seq  # GET is not a write: nothing logged
        server = _restart(server, kill=True)
        reply = _cache(server.client(), "GET", "c", "s", "q", "VECTOR", _blob(_vec(7)))
        assert (reply[0], reply[2], reply[3]) == (b"acknowledged", eid, b"[1]")
    finally:
        server.stop()


def test_snapshot_records_rebuild_an_equal_store_without_the_model() -> None:
    store = SemanticCacheStore(clock=lambda: 1000.0)
    logged: list[Record] = []

    class Log:
        durable = True

        def append(self, record: Record) -> None:
            logged.append(record)

    store.journal = Log()
    a = store.put("c", "s", "q1", b"r1", _vec(1), ttl_s=5, meta=b"{}")
    b = store.put("c", "s", "q2", b"r2", _vec(2))
    store.delete("c", [b, 42])
    assert [type(r) for r in logged] == [SemanticSet, SemanticSet, SemanticDel]
    first, deleted = logged[0], logged[2]
    assert isinstance(first, SemanticSet) and isinstance(deleted, SemanticDel)
    assert (first.expire_at_ms, first.id, deleted.ids) == (1_005_000, a, [b])

    keyspace = Keyspace()
    stores = Stores(VStore(), keyspace, store, SearchStore(keyspace), SsmStateStore(), AttendSlots())
    records = [frame_bytes(rtype, 0, fields) for rtype, fields in snapshot_fields(stores)]
    copy = SemanticCacheStore(clock=lambda: 1000.0)
    copy_keyspace = Keyspace()
    sink = make_sink(Stores(VStore(), copy_keyspace, copy, SearchStore(copy_keyspace), SsmStateStore(),
                            AttendSlots()))
    for raw in records:
        sink(raw[5], decode_fields(raw[HEADER_SIZE:-4]))
    assert [raw[5] for raw in records] == [RecordType.SEMANTIC_SET]
    hit = copy.lookup("c", "s", _vec(1), 0.99)
    assert hit is not None
    original = store.lookup("c", "s", _vec(1), 0.99)
    assert original is not None
    assert (hit[0].entry_id, hit[0].response, hit[0].meta, hit[0].expires_at, hit[1]) == (
        a, b"r1", b"{}", 1005.0, original[1])
    assert copy.put("c", "s", "q3", b"r3", _vec(3)) == b + 1


def test_only_the_write_subcommands_of_ai_semantic_cache_are_tracked_as_writes(tmp_path: Path) -> None:
    import asyncio

    from pion.server.commands.semantic import COMMANDS
    from pion.server.config import load_config
    from pion.server.context import ClientState, CommandContext
    from pion.server.dispatcher import Dispatcher
    from pion.server.state import build_state

    spec = next(s for s in COMMANDS if s.name == "AI.SEMANTIC_CACHE")
    assert spec.write_subcommands == frozenset({"SET", "DEL", "FLUSH"})
    dispatcher = Dispatcher({spec.name: spec}, None, -1)
    dispatcher.track_writes = True
    # A real state and client: the compiled dispatcher checks that ctx is a CommandContext
    # (server/context.py is compiled, issue 13), so a SimpleNamespace stand-in is refused.
    client = ClientState(client_id=1, authenticated=True)
    ctx = CommandContext(server=build_state(load_config(["--dir", str(tmp_path)], env={})), client=client)
    vec = _blob(_vec(1))
    writes = []
    for verb, args in ((b"set", [b"c", b"s", b"t", b"r", b"VECTOR", vec]), (b"GET", [b"c", b"s", b"t", b"VECTOR", vec]),
                       (b"INFO", [b"c"]), (b"DEL", [b"c", b"1"]), (b"FLUSH", [b"c"])):
        out: list[bytes] = []
        before = len(client.write_marks)
        pending = dispatcher.execute(ctx, [b"AI.SEMANTIC_CACHE", verb, *args], out)
        assert pending is not None
        asyncio.run(pending)
        assert not out[0].startswith(b"-"), out
        if len(client.write_marks) > before:
            writes.append(verb)
    assert writes == [b"set", b"DEL", b"FLUSH"]
