"""RAG on SmolLM2-135M: HybridRetrievalCache vs text-RAG (plain prefill of the same prompt).

Eval set: benchmarks/data/rag_eval.json (fictional passages, questions with gold answers, written
before measuring; the test split is reported). For each test question and k in {1, 3, 5}
"retrieved" chunks — the gold passage plus the k-1 passages after it in the corpus, the gold at
position (question number mod k) — four paths build the same token sequence

    stub ("Answer the question using the context.\\n\\nContext:") + chunk_1 + … + chunk_k + suffix
    (suffix = "\\nQuestion: …\\nAnswer:")

and greedily decode up to 12 tokens (stopping at a newline):

  text      one prefill of the whole prompt (the baseline)
  inproc    HybridRetrievalCache(backend="inproc"): stub + packs ingested once, prepare_multi + suffix
  pion      the same through pion-server (fp16 at rest, V.MFETCH per chunk, one round trip)
  pion+rc   pion with CacheBlend-style recompute (recompute_ratio 0.15, recompute_layer 1)

TTFT = time from "have the question" to the first token's logits (prepare/fetch + rotation +
recompute + suffix forward; or the full prefill). Agreement = the decoded answer equals
text-RAG's; accuracy = the gold answer appears in it. Paths are interleaved per question.

  .venv/bin/python benchmarks/bench_rag.py [--split test] [--ks 1,3,5] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prefix_restore import free_port, wait_ping  # (the same server helpers)

from pion import HybridRetrievalCache, load_model
from pion.client.connection import PionClient
from pion.client.runtimes.transformers_runtime import forward_logits

DATA = Path(__file__).resolve().parent / "data" / "rag_eval.json"
STUB = "Answer the question using the context.\n\nContext:"
MAX_NEW = 12
PATHS = ("text", "inproc", "pion", "pion+rc")


def start_pion(port: int, data_dir: Path) -> subprocess.Popen[bytes]:
    """A pion-server on ``port`` with its data in ``data_dir``, answering PING."""
    proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", str(port), "--dir", str(data_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ping(port, proc)
    return proc


def greedy(model: Any, cache: Any, first_logits: torch.Tensor, newline: set[int]) -> list[int]:
    """Greedy continuation from the first token's logits, stopping at a newline token."""
    out: list[int] = []
    logits = first_logits
    for _ in range(MAX_NEW):
        token = int(logits.argmax())
        if token in newline:
            break
        out.append(token)
        logits, cache = forward_logits(model, [token], cache)
    return out


def run_path(path: str, caches: dict[str, HybridRetrievalCache], model: Any, chunk_ids: list[str],
             prompt: list[int], suffix: list[int]) -> tuple[float, Any, torch.Tensor]:
    t0 = time.perf_counter()
    if path == "text":
        logits, cache = forward_logits(model, prompt, None)
    else:
        cache, suffix_ids = caches[path].prepare_multi(chunk_ids, suffix)
        logits, cache = forward_logits(model, suffix_ids, cache)
    return (time.perf_counter() - t0) * 1e3, cache, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="test")
    parser.add_argument("--ks", default="1,3,5")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    data = json.loads(DATA.read_text())
    passages = {p["id"]: p["text"] for p in data["passages"]}
    order = [p["id"] for p in data["passages"]]
    questions = [q for q in data["questions"] if q["split"] == args.split]

    torch.set_num_threads(1)
    model, tok = load_model(device="cpu")
    newline = {i for i in range(len(tok)) if "\n" in tok.decode([i])}
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = start_pion(port, Path(tmp))
        try:
            client = PionClient(port=port, socket_timeout_s=120)
            caches = {"inproc": HybridRetrievalCache(model),
                      "pion": HybridRetrievalCache(model, backend="pion", client=client),
                      "pion+rc": HybridRetrievalCache(model, backend="pion", client=client, recompute_ratio=0.15,
                                                      recompute_layer=1)}
            stub_ids = tok.encode(STUB)
            chunk_tokens = {pid: tok.encode("\n" + text) for pid, text in passages.items()}
            for name, hr in caches.items():
                hr.set_shared_stub(stub_ids)
                if name != "pion+rc":  # shares the pion backend's stored packs
                    for pid, ids in chunk_tokens.items():
                        hr.ingest_pack(pid, ids)
            rows: list[dict[str, Any]] = []
            for qi, q in enumerate(questions):
                suffix = tok.encode(f"\nQuestion: {q['question']}\nAnswer:")
                g = order.index(q["passage"])
                for k in ks:
                    others = [order[(g + j) % len(order)] for j in range(1, k)]
                    chosen = others[:]
                    chosen.insert(qi % k, q["passage"])
                    prompt = stub_ids + [t for pid in chosen for t in chunk_tokens[pid]] + suffix
                    answers: dict[str, str] = {}
                    firsts: dict[str, int] = {}
                    for path in PATHS:
                        ttft, cache, logits = run_path(path, caches, model, chosen, prompt, suffix)
                        firsts[path] = int(logits.argmax())
                        answer = tok.decode(greedy(model, cache, logits, newline)).strip()
                        answers[path] = answer
                        rows.append({"q": q["id"], "k": k, "path": path, "ttft_ms": ttft, "answer": answer,
                                     "first": firsts[path], "correct": q["answer"].lower() in answer.lower(),
                                     "tokens": len(prompt)})
                    for row in rows[-len(PATHS):]:
                        row["agrees"] = row["answer"] == answers["text"]
                        row["first_agrees"] = row["first"] == firsts["text"]
                print(f"{q['id']} done", file=sys.stderr, flush=True)
            client.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    report(rows, ks, len(questions))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


def report(rows: list[dict[str, Any]], ks: list[int], n: int) -> None:
    print("| k chunks | prompt tokens (mean) | path | TTFT p50 ms | saving vs text | answer = text-RAG's "
          "| first token = text-RAG's | gold answer found |\n|---|---|---|---|---|---|---|---|")
    for k in ks:
        at_k = [r for r in rows if r["k"] == k]
        text_p50 = statistics.median(r["ttft_ms"] for r in at_k if r["path"] == "text")
        tokens = statistics.mean(r["tokens"] for r in at_k if r["path"] == "text")
        for path in PATHS:
            sel = [r for r in at_k if r["path"] == path]
            p50 = statistics.median(r["ttft_ms"] for r in sel)
            saving = "—" if path == "text" else f"{(1 - p50 / text_p50) * 100:.0f}%"
            agree = sum(r["agrees"] for r in sel)
            first = sum(r["first_agrees"] for r in sel)
            correct = sum(r["correct"] for r in sel)
            print(f"| {k} | {tokens:.0f} | {path} | {p50:.1f} | {saving} | {agree}/{n} ({agree / n:.0%}) "
                  f"| {first}/{n} ({first / n:.0%}) | {correct}/{n} |")


if __name__ == "__main__":
    main()
