"""FT.HYBRID: one text query and one vector query, fused (redis-py's ``hybrid_search`` syntax).

    FT.HYBRID <idx>
        SEARCH <query> [SCORER <name>] [YIELD_SCORE_AS <alias>]
        VSIM @<vector field> <blob | $param> [KNN <n> K <k> [EF_RUNTIME <ef>]]
             [FILTER <query>] [YIELD_SCORE_AS <alias>]
        [COMBINE RRF <n> [CONSTANT <c>] [WINDOW <w>] | COMBINE LINEAR <n> [ALPHA <a>] [BETA <b>] [WINDOW <w>]]
        [LOAD <n> @<field>... | LOAD *] [LIMIT <offset> <num>] [PARAMS <n> <name> <value>...]
        [TIMEOUT <ms>]

Each side keeps its best WINDOW (default 20) documents: the text side by BM25, the
vector side the K (default 10) nearest that pass FILTER. RRF (the default) scores a
document ``sum(1 / (CONSTANT + rank))`` over the sides it appears in (CONSTANT 60, ranks
from 1); LINEAR scores ``ALPHA * text + BETA * (1 - distance)`` (ALPHA 0.3, BETA 0.7).

Reply (a RESP3 map; RESP2 flat pairs, as redis-py's ``HybridResult`` reads them)::

    {total_results: N, results: [{__key: k, __score: "0.0327", <loaded fields>...}],
     warnings: [], execution_time: "0.4"}
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pion.common.errors import CommandError, clip_for_echo
from pion.server.search.index import Hit, SearchIndex
from pion.server.search.options import take_params
from pion.server.search.query import KnnClause, Node, parse_query
from pion.server.search.words import MISSING_ARGUMENT, Words, text
from pion.server.store.keyspace import Keyspace

DEFAULT_WINDOW = 20
DEFAULT_K = 10
RRF_CONSTANT = 60.0


@dataclass
class HybridRequest:
    """One parsed FT.HYBRID."""

    text: Node
    field: str
    vector: bytes
    k: int = DEFAULT_K
    ef: int | None = None
    vector_filter: Node | None = None
    method: str = "RRF"
    window: int = DEFAULT_WINDOW
    constant: float = RRF_CONSTANT
    alpha: float = 0.3
    beta: float = 0.7
    load: list[str] | None = None
    offset: int = 0
    num: int = 10


def parse_hybrid(raw: list[bytes]) -> HybridRequest:
    """FT.HYBRID's words after the index name -> HybridRequest; -ERR when malformed."""
    params = take_params(raw)
    a = Words(raw, MISSING_ARGUMENT)
    if a.peek() != "SEARCH":
        raise CommandError("SEARCH argument is required")
    a.pos += 1
    text_query = parse_query(text(a.take("SEARCH")), params)
    while a.peek() in ("SCORER", "YIELD_SCORE_AS"):
        a.pos += 1
        a.take("SCORER")
    if a.peek() != "VSIM":
        raise CommandError("VSIM argument is required")
    a.pos += 1
    field = text(a.take("VSIM")).lstrip("@")
    blob = a.take("VSIM")
    if blob.startswith(b"$"):
        name = text(blob[1:])
        if name not in params:
            raise CommandError(f"No such parameter `{clip_for_echo(name)}`")
        blob = params[name]
    req = HybridRequest(text_query.filter, field, blob)
    while a.more():
        opt = a.peek()
        a.pos += 1
        if opt == "KNN":
            _knn_options(a, req)
        elif opt == "RANGE":
            raise CommandError("VSIM RANGE is not supported by this build (use KNN)")
        elif opt == "FILTER":
            req.vector_filter = parse_query(text(a.take("FILTER")), params).filter
        elif opt == "YIELD_SCORE_AS" or opt == "TIMEOUT":
            a.take(opt)
        elif opt == "COMBINE":
            _combine_options(a, req)
        elif opt == "LOAD":
            if a.peek() == "*":
                a.pos += 1
                req.load = ["*"]
            else:
                n = a.count("LOAD")
                req.load = [text(a.take("LOAD")).lstrip("@") for _ in range(n)]
        elif opt == "LIMIT":
            req.offset, req.num = a.count("LIMIT"), a.count("LIMIT")
        elif opt == "PARAMS":
            n = a.count("PARAMS")
            a.pos += n
        else:
            raise CommandError(f"Unknown argument `{clip_for_echo(opt)}` for FT.HYBRID")
    return req


def _knn_options(a: Words, req: HybridRequest) -> None:
    n = a.count("KNN")
    for _ in range(n // 2):
        key = a.peek()
        a.pos += 1
        if key == "K":
            req.k = a.count("K")
        elif key == "EF_RUNTIME":
            req.ef = a.count("EF_RUNTIME")
        else:
            raise CommandError(f"Unknown argument `{clip_for_echo(key)}` in KNN")


def _combine_options(a: Words, req: HybridRequest) -> None:
    req.method = a.peek()
    a.pos += 1
    if req.method not in ("RRF", "LINEAR"):
        raise CommandError(f"Unknown COMBINE method `{clip_for_echo(req.method)}` (RRF or LINEAR)")
    n = a.count("COMBINE")
    for _ in range(n // 2):
        key = a.peek()
        a.pos += 1
        value = a.number(key)
        if key == "CONSTANT":
            req.constant = value
        elif key == "WINDOW":
            req.window = max(1, int(value))
        elif key == "ALPHA":
            req.alpha = value
        elif key == "BETA":
            req.beta = value
        else:
            raise CommandError(f"Unknown argument `{clip_for_echo(key)}` in COMBINE")


def fuse(text_hits: list[Hit], vector_hits: list[Hit], req: HybridRequest) -> list[tuple[bytes, float]]:
    """(key, fused score), best first: RRF over ranks, or LINEAR over BM25 and 1 - distance."""
    fused: dict[bytes, float] = {}
    if req.method == "RRF":
        for ranking in (text_hits, vector_hits):
            for rank, hit in enumerate(ranking, start=1):
                fused[hit.key] = fused.get(hit.key, 0.0) + 1.0 / (req.constant + rank)
    else:
        for hit in text_hits:
            fused[hit.key] = fused.get(hit.key, 0.0) + req.alpha * hit.score
        for hit in vector_hits:
            fused[hit.key] = fused.get(hit.key, 0.0) + req.beta * (1.0 - hit.score)
    return sorted(fused.items(), key=lambda kv: -kv[1])


def run_hybrid(index: SearchIndex, keyspace: Keyspace, raw: list[bytes]) -> dict[str, Any]:
    """Parse and run one FT.HYBRID (the words after the index name)."""
    started = time.perf_counter()
    req = parse_hybrid(raw)
    text_hits = index.text_ranking(req.text)[:req.window]
    allowed = None if req.vector_filter is None else index.filter_docs(req.vector_filter)
    vector_hits = index.knn(KnnClause(min(req.k, req.window), req.field, req.vector, req.ef), allowed)
    ranked = fuse(text_hits, vector_hits, req)
    results = []
    for doc_key, score in ranked[req.offset:req.offset + req.num]:
        item: dict[str | bytes, Any] = {"__key": doc_key, "__score": f"{score:.12g}"}
        if req.load is not None:
            fields = keyspace.get_hash(doc_key) or {}
            if req.load == ["*"]:
                for field_name, field_value in fields.items():
                    item[field_name] = field_value
            else:
                for name in req.load:
                    spec = index.definition.field(name)
                    source = (spec.name if spec is not None else name).encode("utf-8", "surrogateescape")
                    if source in fields:
                        item[name] = fields[source]
        results.append(item)
    return {"total_results": len(ranked), "results": results, "warnings": [],
            "execution_time": f"{(time.perf_counter() - started) * 1000:.3f}"}
