"""One FT index: its documents (hashes under its prefixes) and per-field structures.

Every indexed hash gets a fresh document id (an int, never reused: hnswlib's slot reuse
relies on it); TAG fields keep value -> doc ids, NUMERIC fields a value per doc id,
TEXT fields BM25 postings (``text.TextField``), VECTOR fields a FLAT or HNSW index
(``vectors``). A hash that cannot be indexed (a vector blob of the wrong length, a
NUMERIC value that is not a number) is left out and counted in
``hash_indexing_failures``, as RediSearch does.

``search`` evaluates a parsed ``Query``: the filter tree gives a set of doc ids with
text scores, an optional KNN clause ranks the k nearest of them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pion.common.errors import CommandError, clip_for_echo
from pion.server.search.query import (
    AllNode,
    AndNode,
    KnnClause,
    Node,
    NotNode,
    NumericNode,
    OptionalNode,
    OrNode,
    PhraseNode,
    Query,
    TagNode,
    TermNode,
)
from pion.server.search.schema import FieldSpec, IndexDefinition
from pion.server.search.text import DEFAULT_STOPWORDS, Analyzer, TextField
from pion.server.search.vectors import HnswVectorIndex, VectorIndex, make_vector_index

Scores = dict[int, float]


@dataclass
class Hit:
    """One matching document: its key and score (BM25 sum, or the KNN distance)."""

    key: bytes
    score: float
    distance: float | None = None


class SearchIndex:
    """Documents of one index and the structures queries run on."""

    def __init__(self, definition: IndexDefinition) -> None:
        self.definition = definition
        stop = DEFAULT_STOPWORDS if definition.stopwords is None else frozenset(definition.stopwords)
        self.analyzer = Analyzer(stop)
        self.doc_of: dict[bytes, int] = {}
        self.key_of: dict[int, bytes] = {}
        self._next_doc = 1
        self.failures = 0
        self.text: dict[str, TextField] = {}
        self.tags: dict[str, dict[str, set[int]]] = {}
        self.doc_tags: dict[int, list[tuple[str, str]]] = {}  # doc -> (field, tag): O(own tags) removal
        self.numbers: dict[str, dict[int, float]] = {}
        self.vectors: dict[str, VectorIndex] = {}
        self.sort_values: dict[int, dict[str, bytes]] = {}
        for spec in definition.fields:
            if spec.kind == "TEXT":
                self.text[spec.alias] = TextField(spec.weight, not spec.nostem)
            elif spec.kind == "TAG":
                self.tags[spec.alias] = defaultdict(set)
            elif spec.kind == "NUMERIC":
                self.numbers[spec.alias] = {}
            elif spec.kind == "VECTOR" and spec.vector is not None:
                self.vectors[spec.alias] = make_vector_index(spec.vector)

    @property
    def name(self) -> str:
        return self.definition.name

    def __len__(self) -> int:
        return len(self.doc_of)

    def covers(self, key: bytes) -> bool:
        return any(key.startswith(p) for p in self.definition.prefixes)

    # ---- indexing ---------------------------------------------------------------------------
    def update(self, key: bytes, fields: dict[bytes, bytes] | None) -> None:
        """Index ``key``'s hash as it now is (None: the key no longer holds a hash)."""
        self.remove(key)
        if fields is None:
            return
        try:
            prepared = self._prepare(fields)
        except ValueError:
            self.failures += 1
            return
        doc = self._next_doc
        self._next_doc += 1
        self.doc_of[key] = doc
        self.key_of[doc] = key
        for spec, value in prepared:
            self._add_field(doc, spec, value)

    def bulk_load(self, items: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        """Index many hashes into an empty index (the start-up rebuild): vectors go to
        their index in one batch per field instead of one call per document."""
        batches: dict[str, tuple[list[int], list[np.ndarray]]] = {}
        for key, fields in items:
            try:
                prepared = self._prepare(fields)
            except ValueError:
                self.failures += 1
                continue
            doc = self._next_doc
            self._next_doc += 1
            self.doc_of[key] = doc
            self.key_of[doc] = key
            for spec, value in prepared:
                if spec.kind == "VECTOR":
                    docs, vecs = batches.setdefault(spec.alias, ([], []))
                    docs.append(doc)
                    vecs.append(value)  # type: ignore[arg-type]
                else:
                    self._add_field(doc, spec, value)
        for alias, (docs, vecs) in batches.items():
            self.vectors[alias].add_many(docs, np.stack(vecs))

    def _prepare(self, fields: dict[bytes, bytes]) -> list[tuple[FieldSpec, object]]:
        """Field values parsed for indexing; ValueError when one cannot be indexed."""
        out: list[tuple[FieldSpec, object]] = []
        for spec in self.definition.fields:
            raw = fields.get(spec.name.encode("utf-8", "surrogateescape"))
            if raw is None or spec.noindex:
                continue
            if spec.kind == "VECTOR":
                assert spec.vector is not None  # set for every VECTOR field by the parser
                if len(raw) != spec.vector.blob_bytes:
                    raise ValueError(spec.name)
                vec = np.frombuffer(raw, dtype="<f4").astype(np.float32)
                if not np.all(np.isfinite(vec)):
                    raise ValueError(spec.name)
                out.append((spec, vec))
            elif spec.kind == "NUMERIC":
                value = float(raw)
                if math.isnan(value):
                    raise ValueError(spec.name)
                out.append((spec, value))
            else:
                out.append((spec, raw.decode("utf-8", "replace")))
        return out

    def _add_field(self, doc: int, spec: FieldSpec, value: object) -> None:
        if spec.kind == "TEXT":
            field = self.text[spec.alias]
            words = self.analyzer.tokens(str(value))
            field.add(doc, self.analyzer.stem_all(words) if field.stem else words, words)
        elif spec.kind == "TAG":
            index = self.tags[spec.alias]
            for tag in str(value).split(spec.separator):
                tag = tag.strip()
                if tag:
                    tag = tag if spec.case_sensitive else tag.lower()
                    index[tag].add(doc)
                    self.doc_tags.setdefault(doc, []).append((spec.alias, tag))
        elif spec.kind == "NUMERIC":
            self.numbers[spec.alias][doc] = float(value)  # type: ignore[arg-type]
        elif spec.kind == "VECTOR":
            self.vectors[spec.alias].add(doc, value)  # type: ignore[arg-type]

    def remove(self, key: bytes) -> None:
        doc = self.doc_of.pop(key, None)
        if doc is None:
            return
        del self.key_of[doc]
        for text_field in self.text.values():
            text_field.remove(doc)
        for alias, tag in self.doc_tags.pop(doc, ()):
            docs = self.tags[alias].get(tag)
            if docs is not None:
                docs.discard(doc)
                if not docs:
                    del self.tags[alias][tag]
        for numbers in self.numbers.values():
            numbers.pop(doc, None)
        for vectors in self.vectors.values():
            vectors.remove(doc)

    # ---- graph snapshot ---------------------------------------------------------------------
    def graph_field(self) -> str | None:
        """The one VECTOR field when it is HNSW (such an index snapshots its graph), else None."""
        vector_fields = [spec for spec in self.definition.fields if spec.kind == "VECTOR"]
        if len(vector_fields) == 1 and isinstance(self.vectors[vector_fields[0].alias], HnswVectorIndex):
            return vector_fields[0].alias
        return None

    def graph_snapshot(self) -> tuple[str, list[int], list[bytes], bytes] | None:
        """(field, doc ids, their keys, hnswlib graph), taken at one instant."""
        alias = self.graph_field()
        if alias is None:
            return None
        index = self.vectors[alias]
        assert isinstance(index, HnswVectorIndex)  # graph_field checked it
        docs = list(self.key_of)
        return alias, docs, [self.key_of[d] for d in docs], index.dump()

    def restore_graph(self, alias: str, docs: list[int], keys: list[bytes], blob: bytes,
                      get_hash: Callable[[bytes], dict[bytes, bytes] | None]) -> None:
        """Load a snapshotted graph; the other fields are indexed from the hashes as they are."""
        index = self.vectors.get(alias)
        if not isinstance(index, HnswVectorIndex):
            raise ValueError(f"index {self.name} has no HNSW field {alias}")
        self._next_doc = max(self._next_doc, index.load(blob, docs))
        for doc, key in zip(docs, keys, strict=True):
            self.doc_of[key] = doc
            self.key_of[doc] = key
            fields = get_hash(key)
            if fields is None:
                continue  # written after the snapshot's hashes: the WAL replay indexes it again
            try:
                prepared = self._prepare(fields)
            except ValueError:
                continue
            for spec, value in prepared:
                if spec.kind != "VECTOR":
                    self._add_field(doc, spec, value)

    # ---- querying ---------------------------------------------------------------------------
    def search(self, query: Query) -> list[Hit]:
        """Matching docs, best first: by text score (ties: doc id), or nearest first for KNN."""
        if query.knn is not None:
            return self._knn(query.knn, self.filter_docs(query.filter))
        docs, scores = self._eval(query.filter)
        if not scores:  # no text term: document order, like RediSearch
            return [Hit(self.key_of[d], 1.0) for d in sorted(docs)]
        ranked = sorted(docs, key=lambda d: (-scores.get(d, 0.0), d))
        return [Hit(self.key_of[d], scores.get(d, 0.0)) for d in ranked]

    def text_ranking(self, node: Node) -> list[Hit]:
        """Docs matching ``node``, best BM25 score first (FT.HYBRID's text side)."""
        docs, scores = self._eval(node)
        ranked = sorted(docs, key=lambda d: (-scores.get(d, 0.0), d))
        return [Hit(self.key_of[d], scores.get(d, 0.0)) for d in ranked]

    def knn(self, knn: KnnClause, allowed: set[int] | None) -> list[Hit]:
        return self._knn(knn, allowed)

    def filter_docs(self, node: Node) -> set[int] | None:
        """Doc ids matching ``node`` (None for ``*``: every doc)."""
        return None if isinstance(node, AllNode) else self._eval(node)[0]

    def _knn(self, knn: KnnClause, allowed: set[int] | None) -> list[Hit]:
        spec = self.definition.field(knn.field)
        if spec is None or spec.kind != "VECTOR" or spec.vector is None:
            raise CommandError(f"Unknown field `{clip_for_echo(knn.field)}` (not a VECTOR field of the index)")
        if len(knn.vector) != spec.vector.blob_bytes:
            raise CommandError("Error parsing vector similarity query: query vector blob size "
                               f"({len(knn.vector)}) does not match index's expected size "
                               f"({spec.vector.blob_bytes}).")
        vec = np.frombuffer(knn.vector, dtype="<f4").astype(np.float32)
        found = self.vectors[knn.field].knn(vec, knn.k, allowed, knn.ef_runtime)
        return [Hit(self.key_of[d], dist, dist) for d, dist in found]

    def _all(self) -> set[int]:
        return set(self.key_of)

    def _eval(self, node: Node, exact: bool = False) -> tuple[set[int], Scores]:
        if isinstance(node, AllNode):
            return self._all(), {}
        if isinstance(node, TermNode):
            if exact and not node.prefix:
                return self._exact_term(node), {}
            scores = self._term(node)
            return set(scores), scores
        if isinstance(node, PhraseNode):
            return self._phrase(node), {}
        if isinstance(node, TagNode):
            return self._tag(node), {}
        if isinstance(node, NumericNode):
            return self._numeric(node), {}
        if isinstance(node, NotNode):
            docs, _ = self._eval(node.child, exact=True)  # RediSearch does not stem-expand here
            return self._all() - docs, {}
        if isinstance(node, OptionalNode):
            docs, scores = self._eval(node.child)
            return self._all(), scores
        if isinstance(node, AndNode):
            result: set[int] | None = None
            total: Scores = {}
            for child in node.children:
                docs, scores = self._eval(child, exact)
                result = docs if result is None else result & docs
                for d, s in scores.items():
                    total[d] = total.get(d, 0.0) + s
            assert result is not None  # the parser never builds an empty AND
            return result, {d: s for d, s in total.items() if d in result}
        if isinstance(node, OrNode):
            union: set[int] = set()
            total = {}
            for child in node.children:
                docs, scores = self._eval(child, exact)
                union |= docs
                for d, s in scores.items():
                    total[d] = total.get(d, 0.0) + s
            return union, total
        raise CommandError("Syntax error: unsupported query node")

    def _text_fields(self, name: str | None) -> list[TextField]:
        if name is None:
            return list(self.text.values())
        spec = self.definition.field(name)
        if spec is None:
            raise CommandError(f"Unknown field `{clip_for_echo(name)}`")
        if spec.kind != "TEXT":
            raise CommandError(f"Field `{clip_for_echo(name)}` is not a TEXT field "
                               f"(use @{clip_for_echo(name)}:{{...}} for TAG, [lo hi] for NUMERIC)")
        return [self.text[name]]

    def _exact_term(self, node: TermNode) -> set[int]:
        word = node.word.lower()
        found: set[int] = set()
        for field in self._text_fields(node.field):
            found |= field.exact.get(word, set())
        return found

    def _term(self, node: TermNode) -> Scores:
        word = node.word.lower()
        if not node.prefix and word in self.analyzer.stopwords:
            return {}
        total: Scores = {}
        for field in self._text_fields(node.field):
            if node.prefix:
                found = field.prefix_matching(word)
            else:
                found = field.matching(self.analyzer.stem(word) if field.stem else word)
            for d, s in found.items():
                total[d] = total.get(d, 0.0) + s
        return total

    def _phrase(self, node: PhraseNode) -> set[int]:
        found: set[int] = set()
        for field in self._text_fields(node.field):
            found |= field.phrase(self.analyzer.terms(" ".join(node.words), field.stem))
        return found

    def _tag(self, node: TagNode) -> set[int]:
        spec = self.definition.field(node.field)
        if spec is None:
            raise CommandError(f"Unknown field `{clip_for_echo(node.field)}`")
        if spec.kind != "TAG":
            raise CommandError(f"Field `{clip_for_echo(node.field)}` is not a TAG field")
        index = self.tags[node.field]
        found: set[int] = set()
        for value in node.values:
            found |= index.get(value if spec.case_sensitive else value.lower(), set())
        return found

    def _numeric(self, node: NumericNode) -> set[int]:
        spec = self.definition.field(node.field)
        if spec is None:
            raise CommandError(f"Unknown field `{clip_for_echo(node.field)}`")
        if spec.kind != "NUMERIC":
            raise CommandError(f"Field `{clip_for_echo(node.field)}` is not a NUMERIC field")
        lo, hi = node.lo, node.hi
        return {d for d, v in self.numbers[node.field].items()
                if (v > lo if node.lo_exclusive else v >= lo) and (v < hi if node.hi_exclusive else v <= hi)}

    # ---- FT.INFO ----------------------------------------------------------------------------
    def stats(self) -> dict[str, float | int]:
        vector_bytes = sum(v.nbytes for v in self.vectors.values())
        return {"num_docs": len(self.doc_of), "max_doc_id": self._next_doc - 1,
                "num_terms": sum(f.n_terms for f in self.text.values()),
                "hash_indexing_failures": self.failures,
                "vector_index_sz_mb": vector_bytes / 1024**2}
