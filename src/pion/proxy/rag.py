"""RAG injection (``--rag-index``): on an L1 miss, retrieve top-k documents and prepend them.

For a request that goes to the backend and whose last message is user text:
  1. embed that text with the L1 embedder (the vector the lookup produced, else pion-server's
     ``AI.EMBED`` — the same all-MiniLM-L6-v2 ``pion rag ingest`` indexes with);
  2. ``FT.SEARCH <index> "*=>[KNN k @<vector field> $vec AS __rag_score]"`` on pion-server;
  3. put the documents' ``<field>`` text in a system message (``TEMPLATE``), merged into the
     request's first system message when it has one, else inserted first.
``x_pion.rag`` lists the documents used (``[{"id", "score"}]``, score = cosine distance)
and ``/v1/stats`` counts ``rag_injections``. Answers made with RAG are cached in a scope
that includes the index name (``rag_scope``), so one made with another index's context is
never served. A failed search (server down, no such index) sends the request without
context and reports ``x_pion.rag_error``.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from pion.proxy.scope import ScopeKey

log = logging.getLogger("pion.proxy.rag")
SCORE_FIELD = "__rag_score"
TEMPLATE = ("Answer the user's question using the context below. If the context does not "
            "contain the answer, say you do not know.\n\nContext:\n{documents}")
DOCUMENT = "[{n}] {text}"
MAX_DOC_CHARS = 2000  # one chunk longer than this is cut: a small model's context is short


@dataclass(frozen=True, slots=True)
class RagDocument:
    """One retrieved document."""

    doc_id: str
    score: float
    text: str


@dataclass(slots=True)
class RagOutcome:
    """What retrieval did for one request (``x_pion.rag``)."""

    documents: list[RagDocument] = field(default_factory=list)
    error: str | None = None

    def x_pion(self) -> list[dict[str, Any]]:
        return [{"id": d.doc_id, "score": round(d.score, 4)} for d in self.documents]


def rag_scope(scope: ScopeKey, index: str) -> ScopeKey:
    """The cache scope of a RAG-augmented request: the plain scope plus the index name."""
    return ScopeKey(hashlib.sha256(f"{scope}\x00rag:{index}".encode()).hexdigest()[:32])


def inject(messages: list[dict[str, Any]], documents: list[RagDocument]) -> list[dict[str, Any]]:
    """The messages with the context system message (a new list; the input is not changed)."""
    if not documents:
        return messages
    block = "\n".join(DOCUMENT.format(n=i, text=d.text[:MAX_DOC_CHARS]) for i, d in enumerate(documents, 1))
    context = TEMPLATE.format(documents=block)
    first = messages[0] if messages else None
    if first is not None and first.get("role") == "system" and isinstance(first.get("content"), str):
        return [{**first, "content": f"{first['content']}\n\n{context}"}, *messages[1:]]
    return [{"role": "system", "content": context}, *messages]


class RagRetriever:
    """Embeds and searches over its own pion-server connection."""

    def __init__(self, host: str, port: int, password: str | None, index: str, k: int,
                 text_field: str, vector_field: str) -> None:
        self._redis = aioredis.Redis(host=host, port=port, password=password, socket_timeout=60.0,
                                     socket_connect_timeout=0.5, protocol=2)
        self.index = index
        self.k = k
        self.text_field = text_field
        self.vector_field = vector_field
        self.injections = 0

    async def retrieve(self, text: str, vector: np.ndarray | None) -> RagOutcome:
        """Top-k documents for ``text`` (``vector``: the L1 embedder's, when the proxy embeds)."""
        try:
            if vector is None:
                (blob,) = await self._redis.execute_command("AI.EMBED", text)
            else:
                blob = np.asarray(vector, dtype="<f4").tobytes()
            query = f"*=>[KNN {self.k} @{self.vector_field} $vec AS {SCORE_FIELD}]"
            reply = await self._redis.execute_command(
                "FT.SEARCH", self.index, query, "PARAMS", "2", "vec", blob, "SORTBY", SCORE_FIELD,
                "RETURN", "2", self.text_field, SCORE_FIELD, "LIMIT", "0", str(self.k), "DIALECT", "2")
        except (RedisError, OSError, ValueError) as exc:
            log.warning("RAG search in %s failed: %s", self.index, exc)
            return RagOutcome(error=str(exc))
        return RagOutcome(documents=self._parse(reply))

    def _parse(self, reply: Any) -> list[RagDocument]:
        docs = []
        for i in range(1, len(reply) - 1, 2):
            fields = dict(zip(reply[i + 1][0::2], reply[i + 1][1::2], strict=False))
            text = fields.get(self.text_field.encode())
            if text is None:
                continue
            docs.append(RagDocument(reply[i].decode("utf-8", "replace"),
                                    float(fields.get(SCORE_FIELD.encode(), b"0")),
                                    text.decode("utf-8", "replace")))
        return docs

    async def close(self) -> None:
        await self._redis.aclose()
