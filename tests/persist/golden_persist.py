"""Golden WAL + snapshot files: one fixed mutation script, run against the real stores.

``write_golden(root)`` replays ``mutate`` — every logged record kind: V.CREATE (uniform
and SCHEMA), V.STOREBATCH (small rows buffered, a >= 4 KB blob written zero-copy),
V.DROP, KV.PREFIX.REGISTER (BLOCKS + LAYERS, and SCHEMA), KV.PREFIX.DROP, EVICT,
V.FLUSH, SET (plain, binary key, absolute expiry, KEEPTTL, a >= 4 KB value), DEL,
EXPIRE (a deadline and PERSIST), FLUSHALL, SEMANTIC.SET/DEL/FLUSH/FLUSHALL — into two
data directories:

* ``wal_only/``      the WAL of the whole script, no snapshot;
* ``with_snapshot/`` the script, then SAVE (snapshot, WAL truncated), then ``tail``.

and ``expected.json`` holds ``describe()`` of the stores each directory recovers to.
Every value in the script is fixed (absolute deadlines, a fixed clock for the semantic
cache), so two runs write identical WAL bytes and identical snapshots apart from the
header's ``created_ms``. The files under ``tests/golden/persist/`` were written by the
code *before* the typed record layer (issue 11); ``test_golden_persist.py`` checks that
today's code loads them to exactly ``expected.json`` and writes the same bytes.

Regenerate only when a format changes on purpose:
``PYTHONPATH=src:tests .venv/bin/python tests/persist/golden_persist.py``
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from pion.server.persist import PersistOptions, Persistence
from pion.server.search.store import SearchStore
from pion.server.semantic.cache import SemanticCacheStore
from pion.server.store.attend_slots import AttendSlots
from pion.server.store.keyspace import Keyspace
from pion.server.store.ssm import SsmStateStore
from pion.server.store.stores import Stores
from pion.server.store.vstore import VStore

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden" / "persist"
FAR_MS = 4_102_444_800_000  # 2100-01-01: a deadline still in the future when the test runs
FAR2_MS = 4_102_444_900_000
SEMANTIC_NOW_S = 1_750_000_000.0  # the semantic cache's fixed clock
MAX_SESSIONS = 6


def rows(n_rows: int, kv_dim: int, seed: int) -> bytes:
    """Fixed float32 rows from a closed form (no RNG)."""
    j = np.arange(n_rows * kv_dim, dtype=np.float64)
    return (np.sin(0.1 * j + seed) * (1 + seed % 3)).astype("<f4").tobytes()


def unit(dim: int, seed: int) -> np.ndarray:
    vec = np.cos(np.arange(dim, dtype=np.float64) * 0.7 + seed).astype(np.float32)
    return vec / np.linalg.norm(vec)


def fixed_stores() -> Stores:
    """The stores with fixed parameters (a fixed clock for the semantic cache)."""
    keyspace = Keyspace()
    return Stores(VStore(max_sessions=MAX_SESSIONS, max_bytes=0), keyspace,
                  SemanticCacheStore(clock=lambda: SEMANTIC_NOW_S), SearchStore(keyspace), SsmStateStore(),
                  AttendSlots())


def mutate(s: Stores) -> None:
    """The fixed script: every record kind at least once."""
    v, k, sem = s.vstore, s.keyspace, s.semantic
    # Flushes first (each is logged only when it has something to say or always, per store).
    v.create_session("early", 8, ("fp32",), True)
    v.flush()  # V.FLUSH
    k.flush()  # FLUSHALL
    sem.flush_all()  # SEMANTIC.FLUSHALL
    # V-store sessions: uniform fp32, and a SCHEMA session.
    v.create_session("plain", 8, ("fp32",), True)
    v.store_rows("plain", 0, 0, rows(3, 8, 1), "f32")  # small: buffered
    v.store_rows("plain", 1, 0, rows(160, 8, 2), "f32")  # 5120 bytes: written zero-copy
    v.create_session("mixed", 64, ("fp16", "int8"), False)
    v.store_rows("mixed", 0, 0, rows(4, 64, 3), "f32")
    v.store_rows("mixed", 1, 0, rows(4, 64, 4), "f32")
    v.store_rows("plain", 0, 1, rows(4, 8, 5), "f32")  # overwrite and extend
    # Prefixes: BLOCKS + LAYERS + PREFILL_MS (not persisted), then a SCHEMA prefix dropped.
    hashes = b"".join((i * 0x9E3779B97F4A7C15 % 2**64).to_bytes(8, "little") for i in range(1, 4))
    v.register_prefix("p1", 64, ("fp16",), ("fp16",), True, block_size=16, hashes=hashes, layers=2,
                      prefill_ms=12.5)
    for side, seed in (("p1_pk", 10), ("p1_pv", 20)):
        for layer in range(2):
            v.store_rows(side, layer, 0, rows(5, 64, seed + layer), "f32")
    v.register_prefix("p2", 64, ("fp16", "int8"), ("int8", "fp16"), False)
    v.drop_prefixes(["p2"])  # KV.PREFIX.DROP
    v.create_session("gone", 8, ("fp32",), True)
    v.drop(["gone"])  # V.DROP
    v.create_session("e1", 8, ("int8",), True)
    v.store_rows("e1", 0, 0, rows(2, 8, 6), "f32")
    v.create_session("e0", 8, ("fp32",), True)  # the sixth session
    v.fetch("plain", 0, 0, 1)  # touches: "e1" is now the least recently used
    v.fetch("mixed", 1, 0, 1)
    v.lookup_prefix("p1")
    v.create_session("e2", 8, ("fp32",), True)  # over max_sessions: EVICT e1
    # Keyspace.
    k.set(b"a", b"1")
    k.set(b"bin\x00key", bytes(range(256)))
    k.set(b"ttl", b"x", expire_at_ms=FAR_MS)
    k.set(b"big", bytes(range(256)) * 20)  # 5120 bytes: written zero-copy
    k.expire(b"a", FAR2_MS)  # EXPIRE with a deadline
    k.set(b"a", b"2", keep_ttl=True)
    k.expire(b"ttl", None)  # PERSIST
    k.delete([b"bin\x00key", b"missing"])  # DEL
    # Semantic cache.
    sem.put("faq", "s1", "how do I reset my password", b"click forgot", unit(16, 1), meta=b'{"m": 1}')
    sem.put("faq", "s1", "what is pion", b"a memory layer", unit(16, 2), ttl_s=1e9)
    sem.put("faq", "s2", "other scope", b"resp", unit(16, 3))
    sem.put("other", "x", "to flush", b"gone", unit(8, 4))
    sem.delete("faq", [2, 99])  # SEMANTIC.DEL
    sem.flush("other")  # SEMANTIC.FLUSH


def tail(s: Stores) -> None:
    """Mutations after the snapshot (replayed from the WAL on top of it)."""
    s.keyspace.set(b"after", b"snapshot")
    s.vstore.store_rows("e2", 0, 0, rows(1, 8, 7), "f32")
    s.vstore.create_session("e3", 8, ("fp32",), True)  # EVICT e0
    s.semantic.put("faq", "s1", "after the snapshot", b"tail", unit(16, 5))


def describe(s: Stores) -> dict[str, Any]:
    """Everything recovery rebuilds, as JSON-ready values (bytes as hex, rows as sha256)."""
    sessions = []
    for session in s.vstore.iter_sessions():  # least recently used first
        layers = {}
        for layer, buf in sorted(session.layers.items()):
            raw = bytes(buf.raw(0, buf.n_rows))
            layers[str(layer)] = {"rows": buf.n_rows, "sha256": hashlib.sha256(raw).hexdigest()}
        sessions.append({"sid": session.sid, "kv_dim": session.kv_dim, "formats": list(session.formats),
                         "uniform": session.uniform, "layers": layers})
    prefixes = []
    for entry in sorted(s.vstore.iter_prefixes(), key=lambda e: e.ns):
        blocks = entry.blocks
        prefixes.append({"ns": entry.ns, "kv_dim": entry.kv_dim, "k_formats": list(entry.k_formats),
                         "v_formats": list(entry.v_formats), "uniform": entry.uniform,
                         "layers": entry.layers, "prefill_ms": entry.prefill_ms,
                         "block_size": None if blocks is None else blocks.block_size,
                         "hashes": None if blocks is None else blocks.blob().hex()})
    keys = [{"key": bytes(key).hex(), "value": hashlib.sha256(bytes(value)).hexdigest(), "expire_at_ms": deadline}
            for key, value, deadline in sorted(s.keyspace.items())]
    entries = [{"cache": cache, "next_id": next_id, "id": e.entry_id, "scope": e.scope, "text": e.text,
                "response": bytes(e.response).hex(), "meta": None if e.meta is None else bytes(e.meta).hex(),
                "created_at": e.created_at, "expires_at": e.expires_at,
                "vector": np.asarray(vec, dtype="<f4").tobytes().hex()}
               for cache, next_id, e, vec in s.semantic.iter_entries()]
    return {"sessions": sessions, "prefixes": prefixes, "keys": keys, "semantic": entries}


# ---- wiring: the only part that follows the persistence API of the code under test ----------
def open_persistence(data_dir: Path, stores: Stores) -> Persistence:
    """Recover ``data_dir`` into ``stores`` and attach their journals (as pion-server does)."""
    from pion.server.persist.binding import attach, make_sink

    persist = Persistence(PersistOptions(data_dir, 0, "no"))
    persist.recover(make_sink(stores))
    attach(stores, persist)
    persist.enable_batching()
    return persist


def recover_only(data_dir: Path) -> Stores:
    """Fresh stores loaded from ``data_dir`` (journals left detached)."""
    from pion.server.persist.binding import make_sink
    from pion.server.persist.files import DataLayout
    from pion.server.persist.recovery import recover

    stores = fixed_stores()
    recover(DataLayout(data_dir, 0), make_sink(stores))
    return stores


# ---------------------------------------------------------------------------------------------


def write_golden(root: Path) -> dict[str, Any]:
    """Write ``wal_only/`` and ``with_snapshot/`` under ``root``; returns their described states."""
    expected: dict[str, Any] = {}
    for name in ("wal_only", "with_snapshot"):
        data_dir = root / name
        if data_dir.exists():
            shutil.rmtree(data_dir)
        data_dir.mkdir(parents=True)
        stores = fixed_stores()
        persist = open_persistence(data_dir, stores)
        mutate(stores)
        persist.flush_batch()
        if name == "with_snapshot":
            persist.save()
            tail(stores)
            persist.flush_batch()
        persist.close()
        expected[name] = describe(recover_only(data_dir))
    return expected


def main() -> None:
    expected = write_golden(GOLDEN_DIR)
    (GOLDEN_DIR / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    for path in sorted(GOLDEN_DIR.rglob("*")):
        if path.is_file():
            print(f"{path.relative_to(GOLDEN_DIR)}: {path.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
