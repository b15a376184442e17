"""Golden files for SSM.PREFIX.* state: written by main's code at 1d49644, before the record
layer of issue 11 (see ``test_golden_ssm.py``).

Regenerate only when the format changes on purpose:
``PYTHONPATH=src:tests python tests/persist/golden_ssm.py`` (overwrites ``tests/golden/ssm/``).
The WAL-only directory holds SSM.PREFIX.STORE/DROP (one layer and every layer)/EVICT
(``--maxmemory``)/FLUSH (FLUSHALL) records (types 16-19) and a hybrid prefix whose K/V drop
removes its state; the snapshot directory also holds a snapshot with SSM.PREFIX.STORE
records after the V-store's.
"""

from __future__ import annotations

from pathlib import Path

import redis

from support.golden_files import regenerate

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "ssm"
ARGS = ("--maxmemory", "1mb")


def blob(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


def fill(r: redis.Redis) -> None:
    s = "SSM.PREFIX.STORE"
    r.execute_command(s, "a", 0, blob(100, 1))
    r.execute_command(s, "a", 3, blob(50, 2))
    r.execute_command(s, "b", 1, blob(70, 3))
    r.execute_command("SSM.PREFIX.DROP", "a", 0)
    r.execute_command(s, "c", 2, blob(10, 4))
    r.execute_command("SSM.PREFIX.DROP", "c")
    r.execute_command("FLUSHALL")
    r.execute_command(s, "d", 0, blob(30, 5))
    r.execute_command(s, "e", 1, blob(40, 6))
    r.execute_command("KV.PREFIX.REGISTER", "hy", 8, "fp16")
    r.execute_command(s, "hy", 0, blob(60, 7))
    r.execute_command(s, "gone", 0, blob(20, 8))
    r.execute_command("KV.PREFIX.REGISTER", "gone", 8, "fp16")
    r.execute_command("KV.PREFIX.DROP", "gone")  # its state goes with it (not logged itself)
    for i in range(3):  # 1mb budget: the third evicts state-only namespaces (LRU first)
        r.execute_command(s, f"big{i}", 0, blob(400_000, i))
    r.execute_command(s, "e", 2, blob(40, 9))


def fill_after_snapshot(r: redis.Redis) -> None:
    r.execute_command("SSM.PREFIX.STORE", "late", 4, blob(33, 10))
    r.execute_command("SSM.PREFIX.DROP", "hy", 0)


def answers(r: redis.Redis) -> object:
    """Every namespace's layers 0-7 (hex), and the SSM lines of KV.PREFIX.INFO."""
    names = ["a", "b", "c", "d", "e", "hy", "gone", "big0", "big1", "big2", "late"]
    out: dict[str, object] = {}
    for ns in names:
        layers = r.execute_command("SSM.PREFIX.MFETCH", ns, 0, 8)
        out[ns] = [None if x is None else x.hex() for x in layers]
    info = r.execute_command("KV.PREFIX.INFO").decode()
    lines = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    # Counters (fetches, evictions) start at 0 after a restart; the held state does not.
    out["info"] = {k: v for k, v in lines.items() if k in ("ssm_prefixes", "ssm_layers", "ssm_bytes")}
    return out


if __name__ == "__main__":
    regenerate(GOLDEN_DIR, fill, fill_after_snapshot, answers, ARGS)
