"""Replay a Q&A data set through a running pion-serve and log what answered each query.

Input: JSONL, one object per line with ``question`` (or ``q`` / ``prompt``) and optionally
``id``, ``family``, ``system``. Output: one JSONL row per query::

    {"id": "faq-001", "question": "...", "family": "faq18", "status": 200, "cache": "HIT",
     "source": "l1_cache", "latency_ms": 12.4, "server_latency_ms": 9.8, "similarity": 0.93,
     "route": null, "answer": "..."}

and a summary table (count, share and p50/p95 latency per source). The original design's
``replay_experiment.py``. Queries run one at a time, in file order, so later queries can hit
what earlier ones stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np


def load_dataset(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL data set; every row must have a question."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from exc
            q = row.get("question", row.get("q", row.get("prompt"))) if isinstance(row, dict) else None
            if not isinstance(q, str) or not q.strip():
                raise ValueError(f"{path}:{n}: no 'question' string")
            rows.append({**row, "question": q, "id": row.get("id", f"q{n}")})
    return rows


def replay(rows: Iterable[Mapping[str, Any]], url: str, model: str, system: str | None = None,
           timeout_s: float = 300.0, api_key: str | None = None) -> Iterator[dict[str, Any]]:
    """POST each question to ``url``/v1/chat/completions and yield one result row per query."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=url.rstrip("/").removesuffix("/v1"), timeout=timeout_s, headers=headers) as http:
        for row in rows:
            messages = []
            if system or row.get("system"):
                messages.append({"role": "system", "content": row.get("system") or system})
            messages.append({"role": "user", "content": row["question"]})
            t0 = time.perf_counter()
            out: dict[str, Any] = {"id": row["id"], "question": row["question"], "family": row.get("family")}
            try:
                r = http.post("/v1/chat/completions", json={"model": model, "messages": messages})
                body = r.json()
            except (httpx.HTTPError, ValueError) as exc:
                yield out | {"status": None, "cache": None, "source": "error", "error": str(exc),
                             "latency_ms": round((time.perf_counter() - t0) * 1000, 3)}
                continue
            x = body.get("x_pion") or {} if isinstance(body, dict) else {}
            choices = body.get("choices") if isinstance(body, dict) else None
            answer = (choices[0].get("message") or {}).get("content") if choices else None
            yield out | {"status": r.status_code, "cache": r.headers.get("x-pion-cache"),
                         "source": x.get("source", "error") if r.status_code == 200 else "error",
                         "latency_ms": round((time.perf_counter() - t0) * 1000, 3),
                         "server_latency_ms": x.get("latency_ms"), "similarity": x.get("similarity"),
                         "route": x.get("route"), "answer": answer}


def summarize(results: list[dict[str, Any]]) -> str:
    """A markdown table: queries, share and latency per answering source."""
    lines = ["| source | queries | share | p50 ms | p95 ms |", "|---|---|---|---|---|"]
    total = len(results)
    for source in sorted({r["source"] for r in results}):
        lat = np.array([r["latency_ms"] for r in results if r["source"] == source])
        lines.append(f"| {source} | {len(lat)} | {100.0 * len(lat) / total:.1f}% | "
                     f"{np.percentile(lat, 50):.1f} | {np.percentile(lat, 95):.1f} |")
    served = sum(r["source"] not in ("full_inference", "error") for r in results)
    lines.append(f"| **served from cache** | {served} | {100.0 * served / total if total else 0:.1f}% | | |")
    return "\n".join(lines)
