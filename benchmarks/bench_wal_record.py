"""What a logged SET costs: this tree against a baseline source tree, in one run.

Issue 11 put every logged mutation behind a typed record class (``store/records.py``).
This measures that layer on the hottest write, side by side with a baseline checkout
(e.g. ``git worktree add /tmp/base main``), each in its own process:

1. in-process: ``Keyspace.set`` with the WAL journal attached (batched, ``appendfsync no``),
   flushing the batch every 1000 SETs — µs per SET, best of 5 rounds of 50 000; and recovery
   replaying a WAL of 200 000 SET records (50 000 keys) — µs per record, best of 3;
2. with ``--server``: pion-server from each tree under ``redis-benchmark -t set -d 3 -c 50``
   (with and without ``-P 16``), server CPU µs per request from ``/proc``; rounds interleaved.

Usage (from the repository root):
    python benchmarks/bench_wal_record.py --baseline-src /tmp/base/src [--server] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parent.parent / "src"

_IN_PROCESS = r"""
import tempfile, time
from pathlib import Path
from pion.server.persist import PersistOptions, Persistence
from pion.server.store.keyspace import Keyspace
persist = Persistence(PersistOptions(Path(tempfile.mkdtemp()), 0, "no"))
persist.recover(lambda rtype, fields: None)
ks = Keyspace()
try:  # this tree: the typed record layer
    from pion.server.persist.binding import WalJournal
    ks.journal = WalJournal(persist)
except ImportError:  # before issue 11: string kinds through StoreJournal
    from pion.server.persist import binding as b
    ks.journal = b.StoreJournal(persist, b.KEYSPACE_KINDS, "keyspace", skip=b.expired_key_delete(ks),
                                skip_kinds=b.EXPIRED_KEY_DELETE_KINDS)
persist.enable_batching()
keys = [b"key:%06d" % i for i in range(1000)]
best = float("inf")
for _ in range(5):
    started = time.perf_counter()
    for _ in range(50):
        for key in keys:
            ks.set(key, b"xxx")
        persist.flush_batch()
    best = min(best, (time.perf_counter() - started) / 50_000 * 1e6)
persist.close()
print(best)
"""

_REPLAY = r"""
import tempfile, time
from pathlib import Path
from pion.server.persist import PersistOptions, Persistence
from pion.server.persist.files import DataLayout
from pion.server.persist.recovery import recover
from pion.server.persist import binding
from pion.server.semantic.cache import SemanticCacheStore
from pion.server.store.keyspace import Keyspace
from pion.server.store.vstore import VStore
data_dir = Path(tempfile.mkdtemp())
persist = Persistence(PersistOptions(data_dir, 0, "no"))
persist.recover(lambda rtype, fields: None)
persist.enable_batching()
for i in range(200_000):
    persist.append(6, {"key": b"key:%06d" % (i % 50_000), "value": b"xxx", "expire_at_ms": None})
persist.close()
best = float("inf")
for _ in range(3):
    stores = (VStore(), Keyspace(), SemanticCacheStore())
    try:  # this tree: the sink applies typed records to a Stores
        from pion.server.store.stores import Stores
        sink = binding.make_sink(Stores(*stores))
    except ImportError:  # before issue 11
        sink = binding.make_sink(*stores)
    started = time.perf_counter()
    recover(DataLayout(data_dir, 0), sink)
    best = min(best, (time.perf_counter() - started) / 200_000 * 1e6)
print(best)
"""


def in_process(src: Path, script: str = _IN_PROCESS) -> float:
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(src)},
                         capture_output=True, text=True, check=True, timeout=600)
    return float(out.stdout.strip())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_us(src: Path, pipeline: int, requests: int) -> float:
    """Server CPU µs per SET for pion-server from ``src`` under redis-benchmark."""
    sys.path.insert(0, str(HERE_SRC.parent / "benchmarks"))
    from bench_persistence import free_port, wait_ping

    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", str(port), "--dir", data_dir],
                                env={**os.environ, "PYTHONPATH": str(src)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_ping(port, proc)
            before = cpu_seconds(proc.pid)
            subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-d", "3", "-c", "50", "-P",
                            str(pipeline), "-n", str(requests), "-q"], capture_output=True, check=True, timeout=600)
            return (cpu_seconds(proc.pid) - before) / requests * 1e6
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-src", type=Path, required=True, help="the baseline tree's src/")
    parser.add_argument("--server", action="store_true", help="also measure pion-server under redis-benchmark")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=100_000)
    opts = parser.parse_args()
    trees = {"baseline": opts.baseline_src.resolve(), "this tree": HERE_SRC}
    per_set: dict[str, list[float]] = {name: [] for name in trees}
    replay: dict[str, list[float]] = {name: [] for name in trees}
    cpu: dict[tuple[str, int], list[float]] = {(name, p): [] for name in trees for p in (1, 16)}
    for _ in range(opts.rounds):
        for name, src in trees.items():
            per_set[name].append(in_process(src))
            replay[name].append(in_process(src, _REPLAY))
            if opts.server:
                for pipeline in (1, 16):
                    cpu[(name, pipeline)].append(server_cpu_us(src, pipeline, opts.requests))
        time.sleep(0.1)
    base, new = statistics.median(per_set["baseline"]), statistics.median(per_set["this tree"])
    print(f"\nSET through the WAL journal, median of {opts.rounds} interleaved rounds\n")
    print("| measurement | baseline | this tree | this ÷ baseline |")
    print("|---|---:|---:|---:|")
    print(f"| in-process Keyspace.set + WAL record, µs | {base:.2f} | {new:.2f} | {new / base:.2f}× |")
    base, new = statistics.median(replay["baseline"]), statistics.median(replay["this tree"])
    print(f"| recovery: replay one SET record from the WAL, µs | {base:.2f} | {new:.2f} | {new / base:.2f}× |")
    if opts.server:
        for pipeline in (1, 16):
            b = statistics.median(cpu[("baseline", pipeline)])
            n = statistics.median(cpu[("this tree", pipeline)])
            print(f"| pion-server CPU µs per SET, -P {pipeline} | {b:.2f} | {n:.2f} | {n / b:.2f}× |")


if __name__ == "__main__":
    main()
