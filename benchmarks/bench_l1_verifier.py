"""L1 hit latency with each hit check, next to the miss latency, through real processes (issue 18).

    python benchmarks/bench_l1_verifier.py [--pairs 60] [--backend fake|pion-llm]

pion-server (L1, MiniLM) + pion-serve with ``--verifier guard`` (default), with
``--verifier aligned --cache-threshold 0.8`` and with ``--verifier learned
--cache-threshold 0.65`` (a MiniLM pass in the proxy per hit) and with ``--verifier cross``
(the cross-encoder's pass on top), one after the other on the same server, in
front of the OpenAI-compatible test backend (instant: the miss row is pure proxy + cache
overhead) or a real pion-llm (SmolLM2, CPU). For each of ``--pairs`` paraphrase pairs of
the dev split: ask ``a`` (a miss, stored), then ``b`` (a hit when the check serves it).
Each pair has its own scope (system prompt), so a pair never hits another pair's entry.
Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

PAIRS = ROOT / "benchmarks" / "data" / "semantic_eval_pairs.jsonl"


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p)) if values else float("nan")


def run_mode(proxy_url: str, model: str, system: str, pairs: list[dict]) -> dict[str, list[float]]:
    """Latencies of the ``a`` misses, the ``b`` hits and the ``b`` refusals; each pair gets
    its own system prompt (its own scope), so pairs never hit each other."""
    import httpx

    lat: dict[str, list[float]] = {"a_MISS": [], "b_HIT": [], "b_MISS": []}
    body = {"model": model, "max_tokens": 64, "temperature": 0.0, "stop": ["\n"]}
    with httpx.Client(base_url=proxy_url, timeout=300) as http:
        def ask(q: str, scope: int) -> tuple[str, float]:
            msgs = [{"role": "system", "content": f"{system} {scope}"}, {"role": "user", "content": q}]
            t0 = time.perf_counter()
            r = http.post("/v1/chat/completions", json=body | {"messages": msgs})
            ms = (time.perf_counter() - t0) * 1e3
            r.raise_for_status()
            return r.headers["x-pion-cache"], ms

        for i, p in enumerate(pairs):
            state, ms = ask(p["a"], i)
            if state != "MISS":
                raise SystemExit(f"first question of pair {i} was not a miss: {state}")
            lat["a_MISS"].append(ms)
            state, ms = ask(p["b"], i)
            lat["b_HIT" if state == "HIT" else "b_MISS"].append(ms)
    return lat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--backend", choices=["fake", "pion-llm"], default="fake")
    parser.add_argument("--modes", nargs="+", choices=["guard", "aligned", "learned", "cross"],
                        default=["guard", "aligned", "learned", "cross"])
    args = parser.parse_args()
    from pion.proxy.cross_encoder import read_meta

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from support.fake_backends import FakeBackend
    from support.llm_procs import MODEL, start_llm
    from support.procs import start_server
    from support.proxy_procs import start_proxy, wait_for_embedder

    rows = [json.loads(x) for x in PAIRS.read_text().splitlines()]
    # Pairs whose texts appear once: a text asked before would find its encoding kept by
    # --verifier learned (and skip the model), which would flatter it next to the server's embedder.
    pairs, seen = [], set()
    for r in rows:
        if r["split"] == "dev" and r["category"] == "paraphrase" and not {r["a"], r["b"]} & seen:
            seen |= {r["a"], r["b"]}
            pairs.append(r)
    pairs = pairs[: args.pairs]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "pion")
        try:
            if args.backend == "pion-llm":
                llm = start_llm(Path(tmp) / "llm", "--no-pion")
                url, model, stop_backend = llm.url, MODEL, llm.stop
            else:
                fake = FakeBackend("openai").start()
                url, model, stop_backend = fake.url, "fake-model", fake.stop
            try:
                floors = {"guard": [], "aligned": ["--cache-threshold", "0.8"],
                          "learned": ["--cache-threshold", "0.65"],
                          "cross": ["--cache-threshold", str(read_meta().floor)]}
                for mode in args.modes:
                    extra = floors[mode]
                    proxy = start_proxy(Path(tmp) / f"proxy-{mode}", "--backend", "vllm", "--backend-url", url,
                                        "--pion-port", str(server.port), "--verifier", mode, *extra)
                    try:
                        wait_for_embedder(proxy)
                        while proxy.stats()["l1_verdicts"]["verifier_ready"] is not True:
                            time.sleep(0.2)  # WordNet/MiniLM loading: the guard would decide meanwhile
                        texts0 = int(server.client().info("semantic")["embedder_texts"])
                        lat = run_mode(proxy.url, model, f"bench-{mode}", pairs)
                        texts = int(server.client().info("semantic")["embedder_texts"]) - texts0
                        results[mode] = (lat, texts)
                    finally:
                        proxy.stop()
            finally:
                stop_backend()
        finally:
            server.stop()
    print(f"\n{len(pairs)} dev paraphrase pairs, {args.backend} backend; p50 / p99 ms\n")
    print("| --verifier | miss (a) p50 / p99 | paraphrases (b) served | hit p50 / p99 | refused b p50 | "
          "texts the server embedded |")
    print("|---|---|---|---|---|---|")
    for mode, (lat, texts) in results.items():
        served = len(lat["b_HIT"]) / len(pairs)
        print(f"| {mode} | {pct(lat['a_MISS'], 50):.1f} / {pct(lat['a_MISS'], 99):.1f} | "
              f"{len(lat['b_HIT'])}/{len(pairs)} ({served:.0%}) | "
              f"{pct(lat['b_HIT'], 50):.1f} / {pct(lat['b_HIT'], 99):.1f} | {pct(lat['b_MISS'], 50):.1f} | {texts} |")


if __name__ == "__main__":
    main()
