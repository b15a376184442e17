"""Hashes and FT indexes survive kill -9 (WAL replay) and snapshots (SAVE, then restart).

The index structures are never written: replaying FT.CREATE after the hashes rebuilds
them, so a search after a restart answers exactly what it answered before.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import redis

from support.procs import ServerProcess, start_server
from support.redisearch import needs_hnswlib

pytestmark = needs_hnswlib  # the "docs" index is HNSW (its graph is what snapshots carry)

DIM = 8


def _fill(r: redis.Redis) -> None:
    rng = np.random.default_rng(7)
    r.execute_command("FT.CREATE", "docs", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA",
                      "body", "TEXT", "tag", "TAG", "n", "NUMERIC",
                      "v", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", DIM, "DISTANCE_METRIC", "COSINE")
    r.execute_command("FT.CREATE", "flat", "PREFIX", "1", "doc:", "SCHEMA",
                      "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", DIM, "DISTANCE_METRIC", "L2")
    r.execute_command("FT.CREATE", "gone", "PREFIX", "1", "doc:", "SCHEMA", "body", "TEXT")
    r.execute_command("FT.DROPINDEX", "gone")
    for i in range(40):
        r.hset(f"doc:{i}", mapping={"body": f"document {i} about {'cats' if i % 2 else 'dogs'}",
                                    "tag": "odd" if i % 2 else "even", "n": i,
                                    "v": rng.standard_normal(DIM).astype("<f4").tobytes()})
    r.hdel("doc:3", "tag")
    r.delete("doc:4")
    r.hset("doc:5", "body", "rewritten about birds")
    r.expire("doc:6", 3600)


def _answers(r: redis.Redis) -> list[object]:
    q = struct.pack(f"<{DIM}f", *([1.0] * DIM))
    return [
        r.execute_command("FT.SEARCH", "docs", "*=>[KNN 5 @v $q AS d]", "PARAMS", "2", "q", q,
                          "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2"),
        r.execute_command("FT.SEARCH", "flat", "*=>[KNN 5 @v $q AS d]", "PARAMS", "2", "q", q,
                          "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2"),
        r.execute_command("FT.SEARCH", "docs", "@tag:{odd} @n:[10 20] cats", "NOCONTENT", "SORTBY", "n"),
        r.execute_command("FT.SEARCH", "docs", "birds", "NOCONTENT"),
        sorted(r.execute_command("FT._LIST")),
        r.hgetall("doc:5"),
        r.ttl("doc:6") > 3000,
    ]


def test_hashes_and_indexes_survive_kill_9(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        r = server.client()
        _fill(r)
        before = _answers(r)
        server.kill9()
        server = start_server(tmp_path / "data")
        assert _answers(server.client()) == before
        assert before[3] == [1, b"doc:5"]
        assert before[4] == [b"docs", b"flat"]
    finally:
        server.stop()


def test_hashes_and_indexes_survive_a_snapshot_and_restart(tmp_path: Path) -> None:
    server: ServerProcess = start_server(tmp_path / "data")
    try:
        r = server.client()
        _fill(r)
        assert r.execute_command("SAVE") is True
        # After the snapshot, in the WAL only: a new doc, a deleted one, a moved vector.
        r.hset("doc:100", mapping={"body": "after the snapshot", "n": 100})
        r.delete("doc:7")
        r.hset("doc:8", "v", struct.pack(f"<{DIM}f", *([1.0] * DIM)))
        before = _answers(r)
        server.stop()
        server = start_server(tmp_path / "data")
        r = server.client()
        assert _answers(r) == before
        assert before[0][1] == b"doc:8"  # the moved vector is the nearest, live and restored
        assert r.execute_command("FT.SEARCH", "docs", "snapshot", "NOCONTENT") == [1, b"doc:100"]
        log = server.log()
        assert "FT index docs loaded from its snapshotted graph: 39 docs" in log  # 39 + doc:100 - doc:7
        assert "FT index flat rebuilt: 39 docs" in log  # FLAT is rebuilt, not snapshotted
    finally:
        server.stop()


def test_a_graph_restored_from_a_snapshot_keeps_taking_writes(tmp_path: Path) -> None:
    server: ServerProcess = start_server(tmp_path / "data")
    try:
        r = server.client()
        _fill(r)
        assert r.execute_command("SAVE") is True
        server.stop()
        server = start_server(tmp_path / "data")
        r = server.client()
        for i in range(40, 60):  # new labels must not collide with the loaded graph's
            r.hset(f"doc:{i}", mapping={"body": "fresh", "v": struct.pack(f"<{DIM}f", *([float(i)] * DIM))})
        r.delete("doc:0", "doc:1")
        q = struct.pack(f"<{DIM}f", *([1.0] * DIM))
        reply = r.execute_command("FT.SEARCH", "docs", "*=>[KNN 3 @v $q AS d]", "PARAMS", "2", "q", q,
                                  "SORTBY", "d", "RETURN", "1", "d", "DIALECT", "2")
        assert reply[0] == 3
        assert [float(reply[i + 1][1]) for i in range(1, len(reply), 2)] == [0.0, 0.0, 0.0]
        info = r.execute_command("FT.INFO", "docs")
        assert dict(zip(info[0::2], info[1::2], strict=True))[b"num_docs"] == 39 - 2 + 20
    finally:
        server.stop()


def test_dropindex_dd_is_replayed_as_a_drop_and_deletes(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        r = server.client()
        _fill(r)
        assert r.execute_command("FT.DROPINDEX", "flat", "DD") == b"OK"
        server.kill9()
        server = start_server(tmp_path / "data")
        r = server.client()
        assert r.execute_command("FT._LIST") == [b"docs"]
        assert r.dbsize() == 0
        assert r.execute_command("FT.SEARCH", "docs", "*", "NOCONTENT") == [0]
    finally:
        server.stop()


def test_flushall_is_replayed_as_dropping_every_index(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--appendfsync", "always")
    try:
        r = server.client()
        _fill(r)
        assert r.flushall() is True
        r.execute_command("FT.CREATE", "after", "PREFIX", "1", "a:", "SCHEMA", "t", "TEXT")
        r.hset("a:1", "t", "survivor")
        server.kill9()
        server = start_server(tmp_path / "data")
        r = server.client()
        assert r.execute_command("FT._LIST") == [b"after"]
        assert r.execute_command("FT.SEARCH", "after", "survivor", "NOCONTENT") == [1, b"a:1"]
    finally:
        server.stop()
