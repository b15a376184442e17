"""Semantic-cache speed: ANN choice, AI.SEMANTIC_CACHE GET latency, pion-serve hit vs miss.

    python benchmarks/bench_semantic.py ann      # usearch vs hnswlib vs exact at 100K entries
    python benchmarks/bench_semantic.py get      # AI.SEMANTIC_CACHE GET at 1K / 10K / 100K entries
    python benchmarks/bench_semantic.py e2e      # pion-serve: L1 hit vs miss (pion-llm), p50 / p99

Vectors for ``ann`` and ``get`` are synthetic but clustered like sentence embeddings
(2,000 topic centres, unit-norm rows); queries are stored rows plus noise (cosine ~0.9
to their source), i.e. the paraphrase lookups a cache sees. Each mode prints a
markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

DIM = 384


def clustered_vectors(n: int, seed: int = 0, n_centres: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_centres, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    pick = rng.integers(0, n_centres, n)
    vecs = centres[pick] + 0.06 * rng.standard_normal((n, DIM)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def paraphrase_queries(vecs: np.ndarray, n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    src = vecs[rng.integers(0, len(vecs), n)]
    q = src + 0.025 * rng.standard_normal(src.shape).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p))


def bench_ann(n: int, n_queries: int) -> None:
    from pion.server.semantic.index import ScopeIndex

    vecs = clustered_vectors(n)
    queries = paraphrase_queries(vecs, n_queries)
    truth = np.argmax(queries @ vecs.T, axis=1)
    rows = []
    exact = ScopeIndex(DIM, ann_min_entries=n + 1)
    for i, v in enumerate(vecs):
        exact.add(i, v)
    for kind in ("exact", "usearch", "hnswlib"):
        index = exact if kind == "exact" else ScopeIndex(DIM, kind, ann_min_entries=1)
        t0 = time.perf_counter()
        if kind != "exact":
            for i, v in enumerate(vecs):
                index.add(i, v)
        build_s = time.perf_counter() - t0
        lat, hits = [], 0
        for q, t in zip(queries, truth, strict=True):
            t1 = time.perf_counter()
            best = index.search(q)
            lat.append((time.perf_counter() - t1) * 1e3)
            hits += int(best is not None and best[0] == int(t))
        rows.append((kind, hits / n_queries, pct(lat, 50), pct(lat, 99), build_s))
    print(f"\nANN choice at {n:,} entries, {n_queries} paraphrase queries, dim {DIM}\n")
    print("| index | recall@1 | search p50 ms | search p99 ms | build s (incremental adds) |")
    print("|---|---|---|---|---|")
    for kind, rec, p50, p99, build in rows:
        print(f"| {kind} | {rec:.3f} | {p50:.3f} | {p99:.3f} | {build:.1f} |")
    print("\nExact search latency by size (matrix-vector product):\n")
    print("| entries | p50 ms | p99 ms |")
    print("|---|---|---|")
    for size in (1_000, 5_000, 10_000, 20_000, 50_000, 100_000):
        if size > n:
            break
        sub = vecs[:size]
        lat = []
        for q in queries[:300]:
            t1 = time.perf_counter()
            int(np.argmax(sub @ q))
            lat.append((time.perf_counter() - t1) * 1e3)
        print(f"| {size:,} | {pct(lat, 50):.3f} | {pct(lat, 99):.3f} |")


def bench_get(sizes: list[int], n_queries: int) -> None:
    from support.procs import start_server
    import tempfile

    print("\nAI.SEMANTIC_CACHE GET latency (redis-py, one connection, VECTOR given; "
          "server-side embedding excluded)\n")
    print("| entries in scope | GET p50 ms | GET p99 ms | hits |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "d")
        try:
            conn = server.client()
            for size in sizes:
                vecs = clustered_vectors(size, seed=size)
                pipe = conn.pipeline(transaction=False)
                for i, v in enumerate(vecs):
                    pipe.execute_command("AI.SEMANTIC_CACHE", "SET", f"b{size}", "s", f"q{i}",
                                         f"r{i}", "VECTOR", v.astype("<f4").tobytes())
                    if i % 2000 == 1999:
                        pipe.execute()
                pipe.execute()
                queries = paraphrase_queries(vecs, n_queries)
                lat, hits = [], 0
                for q in queries:
                    blob = q.astype("<f4").tobytes()
                    t1 = time.perf_counter()
                    r = conn.execute_command("AI.SEMANTIC_CACHE", "GET", f"b{size}", "s", "x",
                                             "THRESHOLD", "0.8", "VECTOR", blob)
                    lat.append((time.perf_counter() - t1) * 1e3)
                    hits += int(r is not None)
                print(f"| {size:,} | {pct(lat, 50):.3f} | {pct(lat, 99):.3f} | {hits}/{n_queries} |")
            # server-side embedding cost, for reference
            lat = []
            for i in range(100):
                t1 = time.perf_counter()
                conn.execute_command("AI.SEMANTIC_CACHE", "GET", "b1000", "s",
                                     f"what is the refund policy for order {i}?")
                lat.append((time.perf_counter() - t1) * 1e3)
            print(f"| 1,000 (text, server embeds) | {pct(lat[5:], 50):.3f} | "
                  f"{pct(lat[5:], 99):.3f} | - |")
        finally:
            server.stop()


def _e2e_run(proxy_url: str, model: str, pairs: list[dict], n_miss: int, n_hit: int) -> dict[str, list[float]]:
    import httpx

    lat: dict[str, list[float]] = {"MISS": [], "HIT": []}
    # stop at the first newline so SmolLM2 answers finish by "stop" (only those are cached)
    body = {"model": model, "max_tokens": 64, "temperature": 0.0, "stop": ["\n"]}
    with httpx.Client(base_url=proxy_url, timeout=120) as http:
        def ask(q: str) -> tuple[str, float]:
            t1 = time.perf_counter()
            r = http.post("/v1/chat/completions", json=body | {"messages": [{"role": "user", "content": q}]})
            ms = (time.perf_counter() - t1) * 1e3
            r.raise_for_status()
            return r.headers["x-pion-cache"], ms

        stored = []
        for p in pairs[:n_miss]:
            state, ms = ask(p["a"])
            lat[state].append(ms)
            stored.append(p)
        hitting = [p for p in stored if ask(p["b"])[0] == "HIT"]
        if not hitting:
            raise SystemExit("no paraphrase hit: were the backend's answers finished by 'stop'?")
        for i in range(n_hit):
            state, ms = ask(hitting[i % len(hitting)]["b"])
            lat[state].append(ms)
    return lat


def bench_e2e(n_miss: int, n_hit: int, backend: str) -> None:
    import json
    import tempfile

    from support.fake_backends import FakeBackend
    from support.llm_procs import MODEL, start_llm
    from support.procs import start_server
    from support.proxy_procs import start_proxy, wait_for_embedder

    pairs = [json.loads(x) for x in (Path(__file__).parent / "data" / "semantic_pairs.jsonl").read_text().splitlines()]
    pairs = [p for p in pairs if p["category"] == "paraphrase"]
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "pion")
        stop_backend = None
        try:
            if backend == "pion-llm":
                llm = start_llm(Path(tmp) / "llm", "--no-pion")
                url, model, stop_backend = llm.url, MODEL, llm.stop
            else:
                fake = FakeBackend("openai").start()
                url, model, stop_backend = fake.url, "fake-model", fake.stop
            proxy = start_proxy(Path(tmp) / "proxy", "--backend-url", url, "--pion-port", str(server.port))
            try:
                wait_for_embedder(proxy)
                lat = _e2e_run(proxy.url, model, pairs, n_miss, n_hit)
            finally:
                proxy.stop()
        finally:
            if stop_backend is not None:
                stop_backend()
            server.stop()
    print(f"\npion-serve end to end ({backend} backend, max_tokens 64, stop at newline, httpx keep-alive client)\n")
    print("| outcome | requests | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for state in ("MISS", "HIT"):
        if lat[state]:
            print(f"| {state} | {len(lat[state])} | {pct(lat[state], 50):.1f} | {pct(lat[state], 99):.1f} |")
    if lat["MISS"] and lat["HIT"]:
        print(f"\nmiss / hit p50 ratio: {pct(lat['MISS'], 50) / pct(lat['HIT'], 50):.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("ann")
    a.add_argument("--entries", type=int, default=100_000)
    a.add_argument("--queries", type=int, default=1000)
    g = sub.add_parser("get")
    g.add_argument("--sizes", default="1000,10000,100000")
    g.add_argument("--queries", type=int, default=500)
    e = sub.add_parser("e2e")
    e.add_argument("--misses", type=int, default=40)
    e.add_argument("--hits", type=int, default=200)
    e.add_argument("--backend", choices=["pion-llm", "fake"], default="pion-llm",
                   help="pion-llm (SmolLM2, CPU) or the OpenAI-compatible test server")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.mode == "ann":
        bench_ann(args.entries, args.queries)
    elif args.mode == "get":
        bench_get([int(s) for s in args.sizes.split(",")], args.queries)
    else:
        bench_e2e(args.misses, args.hits, args.backend)


if __name__ == "__main__":
    main()
