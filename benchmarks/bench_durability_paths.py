"""The two `--appendfsync always` reply paths side by side with Redis `appendfsync always`.

Issue 11, item 3: pion-server had two durability paths. (a) *batched* (what runs): small
records are buffered per event-loop iteration, written once and fdatasync'ed once before
any reply of the batch leaves (``before_reply``/``reply_pending`` in net.py). (b)
*barrier*: every write command's reply waits on ``Persistence.write_barrier``, a future
completed by a helper thread that runs group fdatasyncs (``WalWriter.sync_barrier``);
only tests reached it. This script starts Redis (``--appendonly yes --appendfsync
always``), pion-server as shipped (a) and pion-server with (b) wired in instead
(``--barrier-path`` below), and drives each with redis-benchmark: small SET (``-t set
-d 3``, with and without ``-P 16``) and 64 KB writes (Pion V.STOREBATCH of 16 fp32 rows
x kv_dim 1024, Redis SET of the same bytes), rounds interleaved.

It needs a tree where both paths exist: commit 9091874 or earlier (the barrier path was
deleted right after this measurement; docs/operations.md records the result).

Usage (from the repository root):
    PYTHONPATH=src python benchmarks/bench_durability_paths.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_persistence import KV_DIM, VALUE_BYTES, cpu_seconds, free_port, wait_ping  # noqa: E402

import redis  # noqa: E402


def run_barrier_server() -> int:
    """pion-server with path (b): no batching, each write's reply awaits its group fsync."""
    from pion.server import main as server_main
    from pion.server import state as server_state
    from pion.server.context import ServerState

    def open_with_barrier(state: ServerState) -> None:
        server_state.open_state(state)
        state.network.before_reply.clear()
        state.network.reply_pending.clear()
        assert state.persist.wal is not None
        state.persist.wal.batching = False
        state.dispatcher.track_writes = False
        state.dispatcher.write_barrier = state.persist.write_barrier

    server_main.open_state = open_with_barrier  # type: ignore[assignment]
    return server_main.main(sys.argv[2:])


def start(kind: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    data_dir.mkdir(parents=True)
    pion_args = ["--port", str(port), "--dir", str(data_dir), "--appendfsync", "always",
                 "--wal-max-bytes", "64gb"]
    cmd = {"redis": ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
                     "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
           "batched": [sys.executable, "-m", "pion.server", *pion_args],
           "barrier": [sys.executable, __file__, "--barrier-path", *pion_args]}[kind]
    log = open(data_dir / "server.log", "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    wait_ping(port, proc)
    return proc, port


def bench(port: int, args: list[str]) -> float:
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-q", *args], capture_output=True, text=True,
                         timeout=600).stdout
    match = re.search(r"([\d.]+) requests per second", out)
    if match is None:
        raise RuntimeError(f"cannot parse redis-benchmark output: {out[-120:]!r}")
    return float(match.group(1))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--barrier-path":
        sys.exit(run_barrier_server())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set-requests", type=int, default=20000)
    parser.add_argument("--blob-requests", type=int, default=2000)
    opts = parser.parse_args()
    blob = "x" * VALUE_BYTES  # 0x78787878 is a finite fp32 value: valid rows for Pion
    tests = {
        "SET 3 B, 50 clients": ["-t", "set", "-d", "3", "-c", "50", "-n", str(opts.set_requests)],
        "SET 3 B, 50 clients, -P 16": ["-t", "set", "-d", "3", "-c", "50", "-P", "16", "-n",
                                       str(opts.set_requests * 4)],
        "64 KB write, 32 clients": ["-c", "32", "-n", str(opts.blob_requests)],
    }
    kinds = ("redis", "batched", "barrier")
    ops: dict[tuple[str, str], list[float]] = {(t, k): [] for t in tests for k in kinds}
    cpu: dict[tuple[str, str], list[float]] = {(t, k): [] for t in tests for k in kinds}
    root = Path(tempfile.mkdtemp(prefix="pion-bench-durability-"))
    try:
        for rnd in range(opts.rounds):
            for t, (test, args) in enumerate(tests.items()):
                for kind in kinds:
                    proc, port = start(kind, root / f"{kind}-{rnd}-{t}")
                    try:
                        cmd = list(args)
                        if test.startswith("64 KB"):
                            if kind == "redis":
                                cmd += ["SET", "k", blob]
                            else:
                                redis.Redis(port=port).execute_command("V.CREATE", "s", KV_DIM)
                                cmd += ["V.STOREBATCH", "s", "0", "0", blob]
                        n = int(cmd[cmd.index("-n") + 1])
                        before = cpu_seconds(proc.pid)
                        ops[(test, kind)].append(bench(port, cmd))
                        cpu[(test, kind)].append((cpu_seconds(proc.pid) - before) / n * 1e6)
                    finally:
                        proc.send_signal(signal.SIGTERM)
                        proc.wait(timeout=60)
                    print(f"  round {rnd} {test} {kind}: {ops[(test, kind)][-1]:.0f} ops/s", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n`--appendfsync always`, median of {opts.rounds} interleaved rounds\n")
    print("| test | Redis always ops/s | Pion batched ops/s | Pion barrier ops/s | batched ÷ barrier | "
          "batched ÷ Redis | CPU µs/req Redis / batched / barrier |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for test in tests:
        med = {k: statistics.median(ops[(test, k)]) for k in kinds}
        c = {k: statistics.median(cpu[(test, k)]) for k in kinds}
        print(f"| {test} | {med['redis']:.0f} | {med['batched']:.0f} | {med['barrier']:.0f} | "
              f"{med['batched'] / med['barrier']:.2f}× | {med['batched'] / med['redis']:.2f}× | "
              f"{c['redis']:.0f} / {c['batched']:.0f} / {c['barrier']:.0f} |")


if __name__ == "__main__":
    main()
