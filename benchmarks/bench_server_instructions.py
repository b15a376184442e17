"""Server instructions per request, counted by valgrind's callgrind: an A/B of two source
trees that does not depend on how busy the machine is.

CPU time per request (``bench_server_small_ops.py``) swings ±20 % on a shared 2-core machine
and /proc's 10 ms ticks quantize it; instruction counts are the same run after run for the
same code and input. Each tree's pion-server runs under ``valgrind --tool=callgrind``; for
each workload the counters are zeroed (``callgrind_control -z``), ``redis-benchmark`` runs,
and the counters are dumped (``-d``): instructions ÷ requests. One client (``-c 1``), so
every read holds exactly one pipeline and the counts repeat from run to run (with 50
clients, how requests group into reads and WAL batches varies, and so do the counts).

    .venv/bin/python benchmarks/bench_server_instructions.py --base-src /path/to/old/src \\
        [--new-src src] [-n 20000]

Needs valgrind and redis-benchmark (apt-get install -y valgrind redis-tools). Slow: each
server takes about a minute to start under valgrind.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = [  # (label, redis-benchmark test, pipeline, requests factor)
    ("PING", "ping_mbulk", 16, 1.0), ("GET", "get", 16, 1.0), ("SET", "set", 16, 1.0),
    ("PING", "ping_mbulk", 1, 0.25), ("GET", "get", 1, 0.25), ("SET", "set", 1, 0.25),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_ping(port: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(100) == b"+PONG\r\n":
                    return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"nothing answered PING on port {port}")


def latest_totals(out_dir: Path) -> int:
    dumps = sorted(out_dir.glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
    text = dumps[-1].read_text(errors="replace")
    match = re.search(r"^totals:\s+(\d+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no totals in {dumps[-1]}")
    return int(match.group(1))


def measure(src: Path, n: int, work: Path) -> dict[tuple[str, int], float]:
    port = free_port()
    out_dir = work / "callgrind"
    out_dir.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/cg.out",
         sys.executable, "-m", "pion.server", "--port", str(port), "--dir", str(out_dir / "d")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    results: dict[tuple[str, int], float] = {}
    try:
        wait_for_ping(port)
        subprocess.run(["redis-benchmark", "-p", str(port), "-t", "get,set", "-n", "2000",
                        "-q"], check=True, capture_output=True)  # warm up
        for label, test, pipeline, factor in WORKLOADS:
            requests = int(n * factor)
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                           capture_output=True)
            subprocess.run(["redis-benchmark", "-p", str(port), "-t", test, "-n", str(requests),
                            "-c", "1", "-P", str(pipeline), "-d", "3", "-q"], check=True,
                           capture_output=True)
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
                           capture_output=True)
            time.sleep(1)
            results[(label, pipeline)] = latest_totals(out_dir) / requests
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-src", type=Path, required=True)
    parser.add_argument("--new-src", type=Path, default=Path("src"))
    parser.add_argument("-n", type=int, default=20_000, help="requests per -P 16 workload")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control", "redis-benchmark"):
        if shutil.which(tool) is None:
            print(f"{tool} not found", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="bench-instr-"))
    (work / "base").mkdir()
    (work / "new").mkdir()
    base = measure(args.base_src, args.n, work / "base")
    new = measure(args.new_src, args.n, work / "new")
    shutil.rmtree(work, ignore_errors=True)
    print(f"callgrind instructions per request (redis-benchmark -c 1 -d 3, -n {args.n} at "
          f"-P 16, {args.n // 4} at -P 1)\n")
    print("| command | -P | base | new | new ÷ base |")
    print("|---|---|---|---|---|")
    for key, base_ir in base.items():
        print(f"| {key[0]} | {key[1]} | {base_ir:,.0f} | {new[key]:,.0f} | "
              f"{new[key] / base_ir:.3f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
