"""RAG answer quality on SmolLM2: made-up facts answered with --rag-index vs without (issue 16).

    python benchmarks/bench_rag_quality.py [--split test] [--k 3] [--max-tokens 32]

Starts pion-server, ingests ``benchmarks/data/rag_facts/*.md`` with ``pion rag ingest``'s
code (one fact per chunk: ``--chunk-chars 120``), a real pion-llm (SmolLM2-135M,
``--threads 1 --no-pion``) and two pion-serve proxies with ``--no-cache`` (every question
reaches the model): one with ``--rag-index facts --rag-k K``, one without. Each question of
the split (``questions.jsonl``; the split was fixed before any run, dev = id % 4 == 0) is asked
to both, greedy. An answer is correct when it contains the expected string
(case-insensitive). Also reported: retrieval hit rate (the fact's chunk among the k
documents), the search latency itself (AI.EMBED + FT.SEARCH, timed with the proxy's own
``RagRetriever``) and end-to-end latency with and without RAG.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.llm_procs import MODEL, start_llm
from support.procs import start_server
from support.proxy_procs import pion_args, start_proxy

from pion.proxy.rag import RagRetriever
from pion.proxy.rag_ingest import ingest

FACTS = ROOT / "benchmarks" / "data" / "rag_facts"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="test", choices=["dev", "test"])
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    questions = [q for q in map(json.loads, (FACTS / "questions.jsonl").read_text().splitlines())
                 if q["split"] == args.split]
    work = Path("/tmp/pion-bench-rag")
    shutil.rmtree(work, ignore_errors=True)
    server = start_server(work / "data")
    llm = start_llm(work / "llm", "--no-pion", "--threads", "1")
    proxies = []
    try:
        r = server.client()
        t = time.perf_counter()
        n_chunks = ingest(r, "facts", [str(FACTS / f"{n}.md") for n in ("products", "places", "people", "company")],
                          max_chars=120, progress=False)
        print(f"ingested {n_chunks} chunks in {time.perf_counter() - t:.1f}s (first AI.EMBED loads MiniLM)")
        with_rag = start_proxy(work / "p1", "--backend-url", llm.url, "--no-cache", "--rag-index", "facts",
                               "--rag-k", str(args.k), *pion_args(server))
        plain = start_proxy(work / "p2", "--backend-url", llm.url, "--no-cache", *pion_args(server))
        proxies = [with_rag, plain]
        retriever = RagRetriever("127.0.0.1", server.port, None, "facts", args.k, "content", "embedding")
        search_ms, retrieved = [], 0

        async def search_all() -> None:
            nonlocal retrieved
            for q in questions:
                t0 = time.perf_counter()
                outcome = await retriever.retrieve(q["question"], None)
                search_ms.append((time.perf_counter() - t0) * 1000)
                retrieved += any(q["answer"].lower() in d.text.lower() for d in outcome.documents)
            await retriever.close()
        asyncio.run(search_all())
        correct = {"rag": 0, "plain": 0}
        latency: dict[str, list[float]] = {"rag": [], "plain": []}
        for q in questions:
            for name, proxy in (("rag", with_rag), ("plain", plain)):
                t0 = time.perf_counter()
                reply = proxy.openai().chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": q["question"]}],
                    max_tokens=args.max_tokens, temperature=0.0)
                latency[name].append((time.perf_counter() - t0) * 1000)
                text = reply.choices[0].message.content or ""
                ok = q["answer"].lower() in text.lower()
                correct[name] += ok
                print(f"[{name:5}] {'OK ' if ok else 'BAD'} {q['question']} -> {text.strip()[:90]!r}", flush=True)
        n = len(questions)
        print(f"\n{args.split} split, {n} questions, SmolLM2-135M greedy, max_tokens {args.max_tokens}, k {args.k}")
        print("| | correct | p50 ms | p99 ms |")
        print("|---|---|---|---|")
        for name, label in (("plain", "without RAG"), ("rag", f"with --rag-index (k {args.k})")):
            print(f"| {label} | {correct[name]}/{n} ({100 * correct[name] / n:.0f}%) | "
                  f"{np.percentile(latency[name], 50):.0f} | {np.percentile(latency[name], 99):.0f} |")
        print(f"| retrieval: fact among the top {args.k} | {retrieved}/{n} | – | – |")
        print(f"| search alone (AI.EMBED + FT.SEARCH) | – | {np.percentile(search_ms, 50):.1f} | "
              f"{np.percentile(search_ms, 99):.1f} |")
    finally:
        for p in proxies:
            p.stop()
        llm.stop()
        server.stop()


if __name__ == "__main__":
    main()
