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
from typing import Any

from pion.common.errors import CommandError, clip_for_echo
from pion.server.search.index import SearchIndex
from pion.server.search.options import take_params
from pion.server.search.query import AllNode, KnnClause, parse_query
from pion.server.store.keyspace import Keyspace

DEFAULT_WINDOW = 20
DEFAULT_K = 10
RRF_CONSTANT = 60.0


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class _Args:
    def __init__(self, args: list[bytes]) -> None:
        self.args = args
        self.pos = 0

    def more(self) -> bool:
        return self.pos < len(self.args)

    def peek(self) -> str:
        return _text(self.args[self.pos]).upper() if self.more() else ""

    def take(self, what: str) -> bytes:
        if not self.more():
            raise CommandError(f"Missing argument for {what}")
        self.pos += 1
        return self.args[self.pos - 1]

    def number(self, what: str) -> float:
        raw = self.take(what)
        try:
            return float(raw)
        except ValueError:
            raise CommandError(f"Bad arguments for {what}: Could not convert argument to expected type") from None

    def count(self, what: str) -> int:
        raw = self.take(what)
        if not raw.isdigit() or len(raw) > 9:
            raise CommandError(f"Bad arguments for {what}: Could not convert argument to expected type")
        return int(raw)


def run_hybrid(index: SearchIndex, keyspace: Keyspace, raw: list[bytes]) -> dict[str, Any]:
    """Parse and run one FT.HYBRID (the words after the index name)."""
    started = time.perf_counter()
    params = take_params(raw)
    a = _Args(raw)
    if a.peek() != "SEARCH":
        raise CommandError("SEARCH argument is required")
    a.pos += 1
    text_query = parse_query(_text(a.take("SEARCH")), params)
    while a.peek() in ("SCORER", "YIELD_SCORE_AS"):
        a.pos += 1
        a.take("SCORER")
    if a.peek() != "VSIM":
        raise CommandError("VSIM argument is required")
    a.pos += 1
    field = _text(a.take("VSIM")).lstrip("@")
    blob = a.take("VSIM")
    if blob.startswith(b"$"):
        name = _text(blob[1:])
        if name not in params:
            raise CommandError(f"No such parameter `{clip_for_echo(name)}`")
        blob = params[name]
    k, ef, window, constant = DEFAULT_K, None, DEFAULT_WINDOW, RRF_CONSTANT
    method, alpha, beta = "RRF", 0.3, 0.7
    vector_filter = None
    load: list[str] | None = None
    offset, num = 0, 10
    while a.more():
        opt = a.peek()
        a.pos += 1
        if opt == "KNN":
            n = a.count("KNN")
            for _ in range(n // 2):
                key = a.peek()
                a.pos += 1
                if key == "K":
                    k = a.count("K")
                elif key == "EF_RUNTIME":
                    ef = a.count("EF_RUNTIME")
                else:
                    raise CommandError(f"Unknown argument `{clip_for_echo(key)}` in KNN")
        elif opt == "RANGE":
            raise CommandError("VSIM RANGE is not supported by this build (use KNN)")
        elif opt == "FILTER":
            vector_filter = parse_query(_text(a.take("FILTER")), params).filter
        elif opt == "YIELD_SCORE_AS" or opt == "TIMEOUT":
            a.take(opt)
        elif opt == "COMBINE":
            method = a.peek()
            a.pos += 1
            if method not in ("RRF", "LINEAR"):
                raise CommandError(f"Unknown COMBINE method `{clip_for_echo(method)}` (RRF or LINEAR)")
            n = a.count("COMBINE")
            for _ in range(n // 2):
                key = a.peek()
                a.pos += 1
                value = a.number(key)
                if key == "CONSTANT":
                    constant = value
                elif key == "WINDOW":
                    window = max(1, int(value))
                elif key == "ALPHA":
                    alpha = value
                elif key == "BETA":
                    beta = value
                else:
                    raise CommandError(f"Unknown argument `{clip_for_echo(key)}` in COMBINE")
        elif opt == "LOAD":
            if a.peek() == "*":
                a.pos += 1
                load = ["*"]
            else:
                n = a.count("LOAD")
                load = [_text(a.take("LOAD")).lstrip("@") for _ in range(n)]
        elif opt == "LIMIT":
            offset, num = a.count("LIMIT"), a.count("LIMIT")
        elif opt == "PARAMS":
            n = a.count("PARAMS")
            a.pos += n
        else:
            raise CommandError(f"Unknown argument `{clip_for_echo(opt)}` for FT.HYBRID")

    text_hits = index.text_ranking(text_query.filter)[:window]
    allowed = None if vector_filter is None or isinstance(vector_filter, AllNode) else index.filter_docs(vector_filter)
    vector_hits = index.knn(KnnClause(min(k, window), field, blob, ef), allowed)
    fused: dict[bytes, float] = {}
    if method == "RRF":
        for ranking in (text_hits, vector_hits):
            for rank, hit in enumerate(ranking, start=1):
                fused[hit.key] = fused.get(hit.key, 0.0) + 1.0 / (constant + rank)
    else:
        for hit in text_hits:
            fused[hit.key] = fused.get(hit.key, 0.0) + alpha * hit.score
        for hit in vector_hits:
            fused[hit.key] = fused.get(hit.key, 0.0) + beta * (1.0 - hit.score)
    ranked = sorted(fused.items(), key=lambda kv: -kv[1])
    results = []
    for doc_key, score in ranked[offset:offset + num]:
        item: dict[str | bytes, Any] = {"__key": doc_key, "__score": f"{score:.12g}"}
        if load is not None:
            fields = keyspace.get_hash(doc_key) or {}
            if load == ["*"]:
                for field_name, field_value in fields.items():
                    item[field_name] = field_value
            else:
                for name in load:
                    spec = index.definition.field(name)
                    source = (spec.name if spec is not None else name).encode("utf-8", "surrogateescape")
                    if source in fields:
                        item[name] = fields[source]
        results.append(item)
    return {"total_results": len(ranked), "results": results, "warnings": [],
            "execution_time": f"{(time.perf_counter() - started) * 1000:.3f}"}
