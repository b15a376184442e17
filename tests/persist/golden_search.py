"""Golden files for hashes and FT indexes: written by main's code at c804919, before the
record layer of issue 11 (see ``test_golden_search.py``).

Regenerate only when the format changes on purpose:
``PYTHONPATH=src:tests python tests/persist/golden_search.py``
(this overwrites ``tests/golden/search/``). The HSET/HDEL/FT.CREATE/FT.DROPINDEX/FT.GRAPH
records (types 40-44) and the EXPIRE of a hash appear in the WAL-only directory; the
snapshot directory also holds a snapshot with HSET, EXPIRE, FT.CREATE and FT.GRAPH records.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import redis

from support.golden_files import regenerate

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "search"
DIM = 8


def fill(r: redis.Redis) -> None:
    """Indexes (HNSW, FLAT, one dropped), 30 hashes, HDEL, DEL, a rewrite and a TTL."""
    rng = np.random.default_rng(11)
    r.execute_command("FT.CREATE", "docs", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA",
                      "body", "TEXT", "tag", "TAG", "n", "NUMERIC",
                      "v", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", DIM, "DISTANCE_METRIC", "COSINE")
    r.execute_command("FT.CREATE", "flat", "PREFIX", "1", "doc:", "SCHEMA",
                      "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", DIM, "DISTANCE_METRIC", "L2")
    r.execute_command("FT.CREATE", "gone", "PREFIX", "1", "doc:", "SCHEMA", "body", "TEXT")
    r.execute_command("FT.DROPINDEX", "gone")
    for i in range(30):
        r.hset(f"doc:{i}", mapping={"body": f"document {i} about {'cats' if i % 2 else 'dogs'}",
                                    "tag": "odd" if i % 2 else "even", "n": i,
                                    "v": rng.standard_normal(DIM).astype("<f4").tobytes()})
    r.hdel("doc:3", "tag")
    r.delete("doc:4")
    r.hset("doc:5", "body", "rewritten about birds")
    r.hset(b"bin:\x00\xff", mapping={b"f\x00": b"\xff\x00v"})
    r.expire("doc:6", 10 ** 8)
    r.set("plain", "string")


def fill_after_snapshot(r: redis.Redis) -> None:
    r.hset("doc:100", mapping={"body": "after the snapshot", "n": 100,
                               "v": struct.pack(f"<{DIM}f", *([0.5] * DIM))})
    r.delete("doc:7")
    r.hdel("doc:9", "body")
    r.execute_command("FT.CREATE", "late", "PREFIX", "1", "doc:1", "SCHEMA", "n", "NUMERIC")


def _plain(x: object) -> object:
    if isinstance(x, bytes):
        return x.hex()
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return sorted([_plain(k), _plain(v)] for k, v in x.items())
    return x


def answers(r: redis.Redis) -> object:
    """What a client sees: every hash, the index list and fixed queries (JSON-ready)."""
    q = struct.pack(f"<{DIM}f", *([1.0] * DIM))
    keys = sorted(r.keys("*"))
    out: dict[str, object] = {
        "keys": [k.hex() for k in keys],
        "types": [r.type(k).decode() for k in keys],
        "hashes": {k.hex(): _plain(r.hgetall(k)) for k in keys if r.type(k) == b"hash"},
        "ttl_set": [k.hex() for k in keys if r.ttl(k) > 0],
        "indexes": sorted(x.decode() for x in r.execute_command("FT._LIST")),
    }
    queries = [
        ("docs", "*=>[KNN 5 @v $q AS d]", "PARAMS", "2", "q", q, "SORTBY", "d", "RETURN", "1", "d",
         "DIALECT", "2"),
        ("flat", "*=>[KNN 5 @v $q AS d]", "PARAMS", "2", "q", q, "SORTBY", "d", "RETURN", "1", "d",
         "DIALECT", "2"),
        ("docs", "@tag:{odd} @n:[10 20] cats", "NOCONTENT", "SORTBY", "n"),
        ("docs", "birds", "NOCONTENT"),
        ("docs", "document", "NOCONTENT", "SORTBY", "n", "LIMIT", "0", "100"),
    ]
    if "late" in out["indexes"]:  # type: ignore[operator]
        queries.append(("late", "@n:[0 +inf]", "NOCONTENT", "SORTBY", "n", "LIMIT", "0", "100"))
    out["search"] = [_plain(r.execute_command("FT.SEARCH", *qq)) for qq in queries]
    return out


if __name__ == "__main__":
    regenerate(GOLDEN_DIR, fill, fill_after_snapshot, answers)
