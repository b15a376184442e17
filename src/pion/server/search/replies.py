"""FT.SEARCH and FT.INFO replies in the shapes redis-py's search parsers read.

FT.SEARCH, RESP2 (``redis.commands.search.result.Result``)::

    [total, id1, [field, value, ...], id2, [...], ...]
    WITHSCORES: [total, id1, "score", [...], ...]      NOCONTENT: [total, id1, id2, ...]

FT.SEARCH, RESP3 (``Result.from_resp3``)::

    {attributes: [], total_results: N, format: STRING,
     results: [{id, [score], extra_attributes: {field: value}, values: []}], warning: []}

KNN distances are reported as RediSearch does: the float32 value with 12 significant
digits (``0.0100000007078``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pion.server.search.index import Hit, SearchIndex
from pion.server.search.schema import FieldSpec


def format_distance(value: float) -> str:
    return f"{float(np.float32(value)):.12g}"


def search_reply(total: int, rows: list[tuple[Hit, dict[bytes, bytes]]], protocol: int,
                 no_content: bool, with_scores: bool) -> Any:
    if protocol >= 3:
        results = []
        for hit, fields in rows:
            item: dict[str, Any] = {"id": hit.key}
            if with_scores:
                item["score"] = float(hit.score)
            if not no_content:
                item["extra_attributes"] = fields
            item["values"] = []
            results.append(item)
        return {"attributes": [], "total_results": total, "format": "STRING",
                "results": results, "warning": []}
    out: list[Any] = [total]
    for hit, fields in rows:
        out.append(hit.key)
        if with_scores:
            out.append(format_distance(hit.score).encode())
        if not no_content:
            out.append([x for pair in fields.items() for x in pair])
    return out


def _attribute(spec: FieldSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"identifier": spec.name, "attribute": spec.alias, "type": spec.kind}
    if spec.kind == "TEXT":
        out["WEIGHT"] = f"{spec.weight:g}"
    elif spec.kind == "TAG":
        out["SEPARATOR"] = spec.separator
    elif spec.kind == "VECTOR" and spec.vector is not None:
        v = spec.vector
        out.update({"algorithm": v.algorithm, "data_type": "FLOAT32", "dim": v.dim,
                    "distance_metric": v.metric})
        if v.algorithm == "HNSW":
            out.update({"M": v.m, "ef_construction": v.ef_construction, "ef_runtime": v.ef_runtime})
    flags = [f for f, on in (("SORTABLE", spec.sortable), ("NOSTEM", spec.nostem),
                             ("NOINDEX", spec.noindex), ("CASESENSITIVE", spec.case_sensitive)) if on]
    out["flags"] = flags
    return out


def info_reply(index: SearchIndex, build_seconds: float) -> dict[str, Any]:
    """FT.INFO: RediSearch's field names (a RESP3 map, RESP2 flat pairs)."""
    d = index.definition
    stats = index.stats()
    return {
        "index_name": d.name,
        "index_options": [],
        "index_definition": {"key_type": "HASH", "prefixes": list(d.prefixes), "default_score": "1"},
        "attributes": [_attribute(spec) for spec in d.fields],
        "num_docs": stats["num_docs"],
        "max_doc_id": stats["max_doc_id"],
        "num_terms": stats["num_terms"],
        "hash_indexing_failures": stats["hash_indexing_failures"],
        "vector_index_sz_mb": f"{stats['vector_index_sz_mb']:.6f}",
        "total_indexing_time": f"{build_seconds * 1000:.3f}",
        "indexing": 0,
        "percent_indexed": "1",
    }
