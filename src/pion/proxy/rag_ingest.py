"""``pion rag ingest <index> <files or directories>``: build a RAG index without writing code.

    pion rag ingest my_docs ./handbook/ notes.md [--host 127.0.0.1] [--port 1974]
                    [--password pw] [--chunk-chars 800] [--batch 64]

Files (directories are walked for .txt .md .markdown .rst .text) are cut into chunks of at
most ``--chunk-chars`` characters on semantic boundaries (sentences, paragraphs, Markdown
sections) by ``semantic-text-splitter``, embedded by pion-server's ``AI.EMBED`` (the
all-MiniLM-L6-v2 pion-serve's L1 and ``--rag-index`` use) and written with HSET as

    <index>:<sha1(path, chunk number)[:16]>  content <text>  source <path>  chunk <n>  embedding <384 x f32>

so running it again over the same files overwrites instead of duplicating. A missing index
is created (``FT.CREATE <index> ON HASH PREFIX 1 <index>: SCHEMA content TEXT source TAG
chunk NUMERIC embedding VECTOR HNSW 6 TYPE FLOAT32 DIM 384 DISTANCE_METRIC COSINE``); an
existing one is written under its first prefix. A progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import redis

TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".rst", ".text"})
EMBED_DIM = 384


def iter_files(paths: Sequence[str]) -> Iterator[Path]:
    """The files named, and the text files under the directories named, in sorted order."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"no such file or directory: {raw}")


def chunk_text(text: str, path: Path, max_chars: int) -> list[str]:
    """Chunks of at most ``max_chars`` characters, cut at the largest semantic unit that fits."""
    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    capacity = (max(1, max_chars // 4), max_chars)
    splitter = MarkdownSplitter(capacity) if path.suffix.lower() in (".md", ".markdown") else TextSplitter(capacity)
    return [c for c in splitter.chunks(text) if c.strip()]


def ensure_index(r: redis.Redis, index: str) -> bytes:
    """The key prefix documents go under; creates the index when it does not exist."""
    try:
        info = r.execute_command("FT.INFO", index)
    except redis.ResponseError:
        prefix = f"{index}:".encode()
        r.execute_command("FT.CREATE", index, "ON", "HASH", "PREFIX", "1", prefix, "SCHEMA",
                          "content", "TEXT", "source", "TAG", "chunk", "NUMERIC", "embedding", "VECTOR",
                          "HNSW", "6", "TYPE", "FLOAT32", "DIM", str(EMBED_DIM), "DISTANCE_METRIC", "COSINE")
        return prefix
    fields = dict(zip(info[0::2], info[1::2], strict=False))
    definition = fields.get(b"index_definition") or []
    definition = dict(zip(definition[0::2], definition[1::2], strict=False))
    prefixes = definition.get(b"prefixes") or [b""]
    return bytes(prefixes[0])


def doc_key(prefix: bytes, source: str, n: int) -> bytes:
    return prefix + hashlib.sha1(f"{source}\x00{n}".encode()).hexdigest()[:16].encode()


def ingest(r: redis.Redis, index: str, paths: Sequence[str], max_chars: int = 800, batch: int = 64,
           progress: bool = True) -> int:
    """Chunk, embed and HSET every file; returns the number of chunks written."""
    from tqdm import tqdm

    prefix = ensure_index(r, index)
    chunks: list[tuple[str, int, str]] = []
    for path in iter_files(paths):
        text = path.read_text(encoding="utf-8", errors="replace")
        chunks += [(str(path), n, c) for n, c in enumerate(chunk_text(text, path, max_chars))]
    with tqdm(total=len(chunks), unit="chunk", desc=f"ingest {index}", disable=not progress,
              file=sys.stderr) as bar:
        for start in range(0, len(chunks), batch):
            part = chunks[start:start + batch]
            vectors = r.execute_command("AI.EMBED", *(c for _, _, c in part))
            pipe = r.pipeline(transaction=False)
            for (source, n, text), vec in zip(part, vectors, strict=True):
                pipe.hset(doc_key(prefix, source, n),
                          mapping={"content": text, "source": source, "chunk": n, "embedding": vec})
            pipe.execute()
            bar.update(len(part))
    return len(chunks)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pion rag", description="Build a RAG index in pion-server.")
    sub = p.add_subparsers(dest="command", required=True)
    ing = sub.add_parser("ingest", help="chunk, embed and index text files")
    ing.add_argument("index", help="FT index name (created when missing)")
    ing.add_argument("paths", nargs="+", help="files or directories (.txt .md .markdown .rst .text)")
    ing.add_argument("--host", default="127.0.0.1")
    ing.add_argument("--port", type=int, default=1974)
    ing.add_argument("--password")
    ing.add_argument("--chunk-chars", type=int, default=800, help="largest chunk in characters (default 800)")
    ing.add_argument("--batch", type=int, default=64, help="chunks embedded per AI.EMBED call (at most 256)")
    args = p.parse_args(argv)
    if not 1 <= args.batch <= 256 or args.chunk_chars < 1:
        p.error("--batch must be 1..256 and --chunk-chars positive")
    r = redis.Redis(host=args.host, port=args.port, password=args.password, protocol=2)
    try:
        n = ingest(r, args.index, args.paths, args.chunk_chars, args.batch)
    except (FileNotFoundError, redis.RedisError) as exc:
        print(f"pion rag ingest: {exc}", file=sys.stderr)
        return 1
    print(f"{n} chunks indexed in {args.index}")
    return 0
