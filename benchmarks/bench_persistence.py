"""Persistence cost and recovery speed, side by side with redis-server in one run.

1. Write throughput of 64 KB values with several concurrent clients (redis-benchmark
   drives both servers, so the client cost is identical): Pion V.STOREBATCH of 64 KB of
   fp32 rows under ``--appendfsync no|everysec|always`` against Redis SET of the same
   bytes with AOF off and ``appendfsync no|everysec|always``.
2. A large store (default 2 GB of rows): restart time and WAL replay MB/s, SAVE time,
   restart time from the snapshot, BGSAVE time.

Usage:
    .venv/bin/python benchmarks/bench_persistence.py [--requests 3000] [--clients 32]
        [--store-gb 2] [--repeat 3]

Prints markdown tables (docs/benchmarks.md, "Persistence (issue 4)"). Needs Debian's
redis-server and redis-benchmark (apt-get install -y redis-server redis-tools).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

VALUE_BYTES = 64 * 1024
KV_DIM = 1024  # fp32 rows of 4 KiB: a 64 KiB blob is 16 rows


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ping(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 600.0) -> float:
    """Seconds until the server answers PING."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"server on {port} exited with {proc.returncode}")
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return time.monotonic() - started
        except redis.RedisError:
            time.sleep(0.02)
    raise RuntimeError(f"server on {port} did not answer within {timeout_s}s")


class Server:
    """A pion-server or redis-server child process in its own data directory."""

    def __init__(self, kind: str, data_dir: Path, mode: str) -> None:
        self.kind, self.data_dir, self.mode = kind, data_dir, mode
        self.port = free_port()
        self.log_path = data_dir / f"{kind}.log"
        data_dir.mkdir(parents=True, exist_ok=True)
        if kind == "pion":
            cmd = [sys.executable, "-m", "pion.server", "--port", str(self.port), "--dir", str(data_dir),
                   "--appendfsync", mode, "--wal-max-bytes", "64gb"]
        else:
            aof = ["--appendonly", "no"] if mode == "off" else ["--appendonly", "yes", "--appendfsync", mode]
            cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(data_dir),
                   "--save", "", *aof]
        with open(self.log_path, "ab") as log:
            self.started = time.monotonic()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.startup_s = wait_ping(self.port, self.proc)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=600)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_benchmark(port: int, clients: int, requests: int, command: list[str]) -> float:
    """requests/s that redis-benchmark reports for one custom command."""
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(requests),
                          "-q", *command], capture_output=True, text=True, timeout=600).stdout
    match = re.search(r"([\d.]+) requests per second", out)
    if match is None:
        raise RuntimeError(f"cannot parse redis-benchmark output: {out[-500:]}")
    return float(match.group(1))


def throughput(root: Path, clients: int, requests: int, repeat: int
               ) -> list[tuple[str, str, float, float, float]]:
    """(server, mode, median ops/s, MB/s, server CPU us/request) per configuration, runs interleaved."""
    blob = "x" * VALUE_BYTES  # 0x78787878 is a finite fp32 value: valid rows for both servers
    configs = [("pion", "no"), ("pion", "everysec"), ("pion", "always"),
               ("redis", "off"), ("redis", "no"), ("redis", "everysec"), ("redis", "always")]
    results: dict[tuple[str, str], list[float]] = {c: [] for c in configs}
    cpu: dict[tuple[str, str], list[float]] = {c: [] for c in configs}
    for rnd in range(repeat):
        for kind, mode in configs:
            data_dir = root / f"tp-{kind}-{mode}-{rnd}"
            server = Server(kind, data_dir, mode)
            try:
                if kind == "pion":
                    server.client().execute_command("V.CREATE", "s", KV_DIM)
                    cmd = ["V.STOREBATCH", "s", "0", "0", blob]
                else:
                    cmd = ["SET", "k", blob]
                cpu_before = cpu_seconds(server.proc.pid)
                results[(kind, mode)].append(redis_benchmark(server.port, clients, requests, cmd))
                cpu[(kind, mode)].append((cpu_seconds(server.proc.pid) - cpu_before) / requests * 1e6)
            finally:
                server.stop()
                shutil.rmtree(data_dir, ignore_errors=True)
            print(f"  {kind} {mode}: {results[(kind, mode)][-1]:.0f} ops/s", file=sys.stderr)
    return [(kind, mode, statistics.median(v), statistics.median(v) * VALUE_BYTES / 1e6,
             statistics.median(cpu[(kind, mode)])) for (kind, mode), v in results.items()]


def recovery_line(log: str) -> tuple[float, float, float]:
    """(MB, seconds, MB/s) from the last 'recovered ...' log line."""
    matches = re.findall(r"recovered .*?\(([\d.]+) MB in ([\d.]+)s, (\d+) MB/s\)", log)
    mb, secs, rate = matches[-1]
    return float(mb), float(secs), float(rate)


def large_store(root: Path, store_gb: float) -> list[tuple[str, str]]:
    """KV prefixes of SmolLM2-135M's shape (30 layers x K/V x 2048 tokens x kv_dim 192, fp16:
    47 MB each), each layer-side stored with one V.STOREBATCH, as PionPromptCache does."""
    data_dir = root / "large"
    tokens, kv_dim, layers = 2048, 192, 30
    layer_bytes = tokens * kv_dim * 2
    n_prefixes = max(1, round(store_gb * 1024**3 / (2 * layers * layer_bytes)))
    blob = os.urandom(layer_bytes)
    out: list[tuple[str, str]] = []
    server = Server("pion", data_dir, "everysec")
    try:
        conn = server.client()
        started = time.monotonic()
        for i in range(n_prefixes):
            pipe = conn.pipeline(transaction=False)
            pipe.execute_command("KV.PREFIX.REGISTER", f"ns{i}", kv_dim, "fp16", "LAYERS", layers)
            for side in ("_pk", "_pv"):
                for layer in range(layers):
                    pipe.execute_command("V.STOREBATCH", f"ns{i}{side}", layer, 0, blob, "DTYPE", "raw")
            pipe.execute()
        load_s = time.monotonic() - started
        info = conn.info("persistence")
        wal_mb = info["wal_bytes"] / 1e6
        store_mb = n_prefixes * 2 * layers * layer_bytes / 1e6
        out.append(("store (V-store bytes)", f"{store_mb:.0f} MB: {n_prefixes} prefixes x 60 layer-sides "
                    f"x {layer_bytes / 1e6:.2f} MB"))
        out.append(("WAL written while loading (everysec)", f"{wal_mb:.0f} MB in {load_s:.1f}s "
                    f"({wal_mb / load_s:.0f} MB/s through redis-py)"))
        probe = conn.execute_command("V.FETCH", f"ns{n_prefixes - 1}_pv", layers - 1, "RANGE", 0, tokens,
                                     "DTYPE", "raw")
    finally:
        server.stop()
    server = Server("pion", data_dir, "everysec")
    try:
        mb, secs, rate = recovery_line(server.log_path.read_text())
        out.append(("restart from the WAL alone: time to first PING", f"{server.startup_s:.2f} s"))
        out.append(("WAL replay", f"{mb:.0f} MB in {secs:.2f} s = {rate:.0f} MB/s"))
        conn = server.client()
        assert conn.execute_command("V.FETCH", f"ns{n_prefixes - 1}_pv", layers - 1, "RANGE", 0, tokens,
                                    "DTYPE", "raw") == probe
        started = time.monotonic()
        conn.execute_command("SAVE")
        save_s = time.monotonic() - started
        snap_mb = (data_dir / "pion.vstore.0").stat().st_size / 1e6
        out.append(("SAVE (foreground, fsync + rename)", f"{snap_mb:.0f} MB in {save_s:.2f} s = "
                    f"{snap_mb / save_s:.0f} MB/s"))
        started = time.monotonic()
        conn.execute_command("BGSAVE")
        pings = []
        while conn.info("persistence")["bgsave_in_progress"]:
            ping_started = time.monotonic()
            conn.ping()
            pings.append(time.monotonic() - ping_started)
            time.sleep(0.01)
        bg_s = time.monotonic() - started
        out.append(("BGSAVE (clients keep being served)", f"{bg_s:.2f} s; {len(pings)} PINGs meanwhile, "
                    f"median {statistics.median(pings or [0]) * 1e3:.1f} ms, max {max(pings or [0]) * 1e3:.1f} ms"))
    finally:
        server.stop()
    server = Server("pion", data_dir, "everysec")
    try:
        mb, secs, rate = recovery_line(server.log_path.read_text())
        out.append(("restart from the snapshot: time to first PING", f"{server.startup_s:.2f} s"))
        out.append(("snapshot load", f"{mb:.0f} MB in {secs:.2f} s = {rate:.0f} MB/s"))
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store-gb", type=float, default=2.0)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        sys.exit("needs redis-server and redis-benchmark: apt-get install -y redis-server redis-tools")
    root = Path(tempfile.mkdtemp(prefix="pion-bench-persist-", dir=args.dir))
    try:
        rows = throughput(root, args.clients, args.requests, args.repeat)
        by = {(k, m): ops for k, m, ops, _, _ in rows}
        print(f"\n64 KB writes, {args.clients} concurrent clients, {args.requests} requests, "
              f"median of {args.repeat} interleaved runs\n")
        print("| server | fsync policy | ops/s | MB/s | server CPU µs/request | vs Pion `no` | "
              "vs Redis same mode |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for kind, mode, ops, mbs, cpu_us in rows:
            vs_no = f"{ops / by[('pion', 'no')]:.2f}x" if kind == "pion" else ""
            peer = ("redis", mode) if kind == "pion" else None
            vs_redis = f"{ops / by[peer]:.2f}x" if peer in by else ""
            label = "AOF off" if mode == "off" else mode
            print(f"| {'Pion V.STOREBATCH' if kind == 'pion' else 'Redis SET'} | {label} | {ops:.0f} | "
                  f"{mbs:.0f} | {cpu_us:.0f} | {vs_no} | {vs_redis} |")
        if args.store_gb > 0:
            print(f"\nLarge store ({args.store_gb:g} GB asked)\n")
            print("| measurement | result |")
            print("|---|---|")
            for name, value in large_store(root, args.store_gb):
                print(f"| {name} | {value} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
