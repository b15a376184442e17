"""Start-up of pion-server on an FT index's data: WAL replay + bulk rebuild, then SAVE and a
restart from the snapshot (which carries the HNSW graph). Run after bench_vector_search.py,
which leaves /tmp/pion-bench-vec-pion-HNSW behind (100,000 hashes and the index's FT.CREATE).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_search_restart.py [data dir]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.procs import start_server


def log_lines(text: str, *needles: str) -> list[str]:
    return [line.split("INFO ", 1)[-1] for line in text.splitlines() if any(n in line for n in needles)]


def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pion-bench-vec-pion-HNSW")
    t = time.perf_counter()
    server = start_server(data, wait_s=1200)
    print(f"ready (WAL replay + bulk rebuild) in {time.perf_counter() - t:.1f}s", flush=True)
    t = time.perf_counter()
    server.client().execute_command("SAVE")
    print(f"SAVE {time.perf_counter() - t:.1f}s", log_lines(server.log(), "snapshot saved"), flush=True)
    server.stop()
    t = time.perf_counter()
    server = start_server(data, wait_s=1200)
    print(f"ready (snapshot with graph) in {time.perf_counter() - t:.1f}s",
          log_lines(server.log(), "recovered", "FT index"), flush=True)
    server.stop()


if __name__ == "__main__":
    main()
