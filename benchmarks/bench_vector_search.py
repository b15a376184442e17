"""FT.SEARCH KNN: pion-server vs RediSearch side by side, HNSW and FLAT (issue 16).

    python benchmarks/bench_vector_search.py [--n 100000] [--dim 384] [--queries 200]
                                             [--ef 10,50,100]

For each engine (pion-server; ``redis-server --loadmodule redisearch.so`` from the
throw-away venv of ``tests/support/redisearch.py``) and algorithm (HNSW M 16 /
EF_CONSTRUCTION 200, FLAT), a fresh server gets ``FT.CREATE`` then ``--n`` hashes (a
random unit ``--dim``-float32 vector each, COSINE) through pipelined HSET (1000 per round
trip): the ingest rate includes indexing. Memory per vector is the server's RSS growth over
the ingest divided by n (hash + index + allocator). Vectors: unit vectors around n/100
random centres (``clustered``), queries drawn the same way. Then ``--queries`` sequential
``FT.SEARCH … "*=>[KNN 10 @v $q EF_RUNTIME ef]" NOCONTENT`` round trips (client-side
latency, p50/p99) at each ``--ef`` (HNSW), and recall@10 against exact numpy top-10.
Finally pion-server is restarted on its data directory and the index rebuild is timed.
Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.procs import start_server
from support.redisearch import RediSearchProcess, redisearch_paths

BATCH = 1000


def clustered(n: int, n_queries: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around n/100 random centres (sentence embeddings cluster by topic;
    i.i.d. Gaussian vectors are the ANN worst case no real corpus looks like). Queries are
    fresh points drawn the same way, not members of the data."""
    rng = np.random.default_rng(42)
    centres = rng.standard_normal((max(1, n // 100), dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def draw(count: int) -> np.ndarray:
        pts = centres[rng.integers(0, len(centres), count)] + 0.05 * rng.standard_normal((count, dim))
        pts /= np.linalg.norm(pts, axis=1, keepdims=True)
        return pts.astype("<f4")
    return draw(n), draw(n_queries)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def create(r: redis.Redis, algorithm: str, dim: int) -> None:
    extra = ["M", "16", "EF_CONSTRUCTION", "200"] if algorithm == "HNSW" else []
    r.execute_command("FT.CREATE", "bench", "ON", "HASH", "PREFIX", "1", "v:", "SCHEMA", "v", "VECTOR", algorithm,
                      str(6 + len(extra)), "TYPE", "FLOAT32", "DIM", str(dim), "DISTANCE_METRIC", "COSINE", *extra)


def ingest(r: redis.Redis, data: np.ndarray) -> float:
    started = time.perf_counter()
    for start in range(0, len(data), BATCH):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + BATCH, len(data))):
            pipe.hset(f"v:{i}", "v", data[i].tobytes())
        pipe.execute()
    return time.perf_counter() - started


def wait_indexed(r: redis.Redis, n: int) -> None:
    """RediSearch may index in the background: wait until every doc is searchable."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        info = r.execute_command("FT.INFO", "bench")
        fields = dict(zip(info[0::2], info[1::2], strict=False))
        if int(fields[b"num_docs"]) >= n and int(fields.get(b"indexing", 0)) == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("index never caught up")


def run_queries(r: redis.Redis, queries: np.ndarray, truth: np.ndarray, ef: int | None) -> tuple[float, float, float]:
    ef_part = f" EF_RUNTIME {ef}" if ef is not None else ""
    q = f"*=>[KNN 10 @v $q{ef_part}]"
    times, hits = [], 0
    for qi, vec in enumerate(queries):
        t = time.perf_counter()
        reply = r.execute_command("FT.SEARCH", "bench", q, "PARAMS", "2", "q", vec.tobytes(), "NOCONTENT",
                                  "LIMIT", "0", "10", "DIALECT", "2")
        times.append((time.perf_counter() - t) * 1000)
        found = {int(k.split(b":")[1]) for k in reply[1:]}
        hits += len(found & set(truth[qi].tolist()))
    return float(np.percentile(times, 50)), float(np.percentile(times, 99)), hits / (10 * len(queries))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--ef", default="10,50,200")
    ap.add_argument("--engines", default="pion,redisearch")
    ap.add_argument("--algorithms", default="HNSW,FLAT")
    args = ap.parse_args()
    data, queries = clustered(args.n, args.queries, args.dim)
    truth = np.argsort(-np.einsum("qd,nd->qn", queries, data), axis=1)[:, :10]
    paths = redisearch_paths()
    rows = []
    print(f"# {args.n} x {args.dim} float32 COSINE, {args.queries} queries, KNN 10", flush=True)
    for engine in args.engines.split(","):
        for algorithm in args.algorithms.split(","):
            tmp = Path(f"/tmp/pion-bench-vec-{engine}-{algorithm}")
            if engine == "pion":
                import shutil
                shutil.rmtree(tmp, ignore_errors=True)
                server = start_server(tmp)
                pid = server.proc.pid
            else:
                if paths is None:
                    print("RediSearch unavailable: skipped", flush=True)
                    continue
                server = RediSearchProcess(*paths)
                pid = server.proc.pid
            try:
                r = server.client()
                create(r, algorithm, args.dim)
                before = rss_bytes(pid)
                secs = ingest(r, data)
                wait_indexed(r, args.n)
                secs_indexed = secs  # pion indexes before replying; RediSearch's wait is ~0 for hashes
                mem = (rss_bytes(pid) - before) / args.n
                efs = [int(e) for e in args.ef.split(",")] if algorithm == "HNSW" else [None]
                for ef in efs:
                    p50, p99, recall = run_queries(r, queries, truth, ef)
                    rows.append((engine, algorithm, ef, args.n / secs_indexed, mem, p50, p99, recall))
                    print(f"{engine:10} {algorithm:4} ef={ef} ingest {args.n / secs_indexed:8.0f}/s "
                          f"mem {mem:7.0f} B/vec p50 {p50:6.2f} ms p99 {p99:6.2f} ms recall@10 {recall:.3f}",
                          flush=True)
                if engine == "pion" and algorithm == "HNSW":
                    server.stop()
                    t = time.perf_counter()
                    server = start_server(tmp, wait_s=1200)
                    restart = time.perf_counter() - t
                    m = re.search(r"FT index bench rebuilt: (\d+) docs in ([\d.]+)s", server.log())
                    print(f"pion restart with {args.n} hashes + HNSW rebuild: ready in {restart:.1f}s "
                          f"(rebuild {m.group(2) if m else '?'}s)", flush=True)
            finally:
                server.stop()
    print("\n| engine | index | EF_RUNTIME | ingest (HSET+index)/s | RSS bytes/vector | KNN10 p50 ms | p99 ms | recall@10 |")
    print("|---|---|---|---|---|---|---|---|")
    for engine, algorithm, ef, rate, mem, p50, p99, recall in rows:
        print(f"| {engine} | {algorithm} | {ef if ef is not None else '–'} | {rate:,.0f} | {mem:,.0f} | "
              f"{p50:.2f} | {p99:.2f} | {recall:.3f} |")


if __name__ == "__main__":
    main()
