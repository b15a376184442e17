"""Generate a Q&A replay set from a folder of documents through any OpenAI-compatible backend.

Each ``.md`` / ``.txt`` file is cut into chunks of about ``chunk_chars`` characters at
paragraph boundaries; for each chunk the backend is asked for ``per_chunk`` questions the
chunk answers, one per line. Lines ending in "?" (numbering and bullets stripped) become
rows ``{"id", "question", "family": "<file>#<chunk>", "source": "<file>"}`` that
``pion serve-tools replay`` reads. The request carries ``Cache-Control: no-cache, no-store``
so generating through pion-serve neither hits nor fills its cache. The original design's generate_qa.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

PROMPT = ("Write {n} different questions a user could ask that the following text answers. "
          "One question per line, each ending with a question mark, nothing else.\n\nText:\n{chunk}")
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|Q\d*[:.])\s*")


def chunks_of(text: str, chunk_chars: int = 1200) -> list[str]:
    """Paragraph-aligned chunks of at most about ``chunk_chars`` characters."""
    out: list[str] = []
    current = ""
    for para in (p.strip() for p in re.split(r"\n\s*\n", text)):
        if not para:
            continue
        if current and len(current) + len(para) > chunk_chars:
            out.append(current)
            current = ""
        current = f"{current}\n\n{para}" if current else para
    if current:
        out.append(current)
    return out


def questions_in(reply: str) -> list[str]:
    """The questions of a model reply: lines ending in '?', bullets and numbers removed."""
    out = []
    for line in reply.splitlines():
        q = _BULLET.sub("", line).strip().strip('"')
        if q.endswith("?") and len(q.split()) >= 3 and q not in out:
            out.append(q)
    return out


def generate(folder: Path, url: str, model: str, per_chunk: int = 3, chunk_chars: int = 1200,
             timeout_s: float = 300.0, api_key: str | None = None) -> Iterator[dict[str, Any]]:
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".md", ".txt") and p.is_file())
    if not files:
        raise ValueError(f"{folder}: no .md or .txt files")
    headers = {"cache-control": "no-cache, no-store"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    n = 0
    with httpx.Client(base_url=url.rstrip("/").removesuffix("/v1"), timeout=timeout_s, headers=headers) as http:
        for path in files:
            rel = str(path.relative_to(folder))
            for i, chunk in enumerate(chunks_of(path.read_text(encoding="utf-8", errors="replace"), chunk_chars)):
                r = http.post("/v1/chat/completions", json={
                    "model": model, "temperature": 0.7,
                    "messages": [{"role": "user", "content": PROMPT.format(n=per_chunk, chunk=chunk)}]})
                r.raise_for_status()
                reply = r.json()["choices"][0]["message"].get("content") or ""
                for q in questions_in(reply)[:per_chunk]:
                    yield {"id": f"gen-{n:04d}", "question": q, "family": f"{rel}#{i}", "source": rel}
                    n += 1
