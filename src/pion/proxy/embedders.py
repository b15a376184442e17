"""Where L1 vectors come from: pion-server's auto-embed, SIE, or Ollama.

``pion`` sends only text and lets the server embed (no vector crosses the wire); ``sie``
and ``ollama`` embed in the proxy and send the vector with VECTOR. ``auto`` cascades
pion -> sie (only when --sie-url is set) -> ollama; explicit choices never fall through.
A request whose embedding fails is served without the cache; the failure is logged (once
per outage) and ``/health`` reports ``degraded`` until an embedding succeeds again.
"""

from __future__ import annotations

import logging

import httpx
import numpy as np

from pion.proxy.cache_client import SemanticCacheClient
from pion.proxy.config import ServeConfig


class EmbedderChoice:
    """Resolves the embed backend and counts calls per backend for /v1/stats."""

    def __init__(self, config: ServeConfig, cache: SemanticCacheClient, http: httpx.AsyncClient) -> None:
        self._config = config
        self._cache = cache
        self._http = http
        self.backend: str | None = None if config.embed_backend == "auto" else config.embed_backend
        self.calls = {"sie": 0, "ollama": 0, "pion": 0}
        self.last_error: str | None = None

    def _failed(self, backend: str, exc: Exception) -> None:
        if self.last_error is None:
            logging.getLogger("pion.serve").error("embed backend %s failed, serving uncached: %s", backend, exc)
        self.last_error = f"{backend}: {exc}"

    @property
    def space(self) -> str:
        """Names the vector space for scoping: backend plus model where the proxy embeds."""
        if self.backend == "sie":
            return f"sie:{self._config.sie_model}"
        if self.backend == "ollama":
            return f"ollama:{self._config.ollama_embed_model}"
        return "pion"

    async def resolve(self) -> str | None:
        """Settle ``auto``: pion when the server embeds, else sie / ollama."""
        if self.backend is not None:
            return self.backend
        outcome = await self._cache.embed("warm up")
        if outcome == "ok":
            self.backend = "pion"
        elif outcome == "refused":
            # the cascade: sie (only with --sie-url), then ollama; the first that embeds wins
            for candidate in (["sie"] if self._config.sie_url else []) + ["ollama"]:
                try:
                    await (self._sie("warm up") if candidate == "sie" else self._ollama("warm up"))
                except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                    self._failed(candidate, exc)
                    continue
                self.backend, self.last_error = candidate, None
                break
        return self.backend

    async def vector(self, text: str) -> tuple[bool, np.ndarray | None]:
        """(usable, vector): vector None means "let pion-server embed the text"."""
        backend = await self.resolve()
        if backend is None or backend == "none":
            return False, None
        if backend == "pion":
            self.calls["pion"] += 1
            return True, None
        try:
            vec = await (self._sie(text) if backend == "sie" else self._ollama(text))
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            self._failed(backend, exc)
            return False, None
        self.calls[backend] += 1
        self.last_error = None
        return True, vec

    async def embed_many(self, texts: list[str]) -> np.ndarray | None:
        """(n, dim) vectors of ``texts`` in the L1 vector space, or None when the embedder is
        down; pion-server embeds with AI.EMBED. Used by the router and the L3/L3b layers."""
        backend = await self.resolve()
        if backend is None or backend == "none" or not texts:
            return None
        try:
            if backend == "pion":
                vecs = await self._cache.embed_vectors(texts)
            elif backend == "sie":
                vecs = await self._sie_many(texts)
            else:
                vecs = np.stack([await self._ollama(t) for t in texts])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            self._failed(backend, exc)
            return None
        if vecs is not None:
            self.calls[backend] += 1
        return vecs

    async def _sie(self, text: str) -> np.ndarray:
        return (await self._sie_many([text]))[0]

    async def _sie_many(self, texts: list[str]) -> np.ndarray:
        url = f"{str(self._config.sie_url).rstrip('/')}/v1/embeddings"
        r = await self._http.post(url, json={"model": self._config.sie_model, "input": texts}, timeout=10.0)
        r.raise_for_status()
        rows = sorted(r.json()["data"], key=lambda d: d["index"])
        return np.asarray([d["embedding"] for d in rows], dtype=np.float32)

    async def _ollama(self, text: str) -> np.ndarray:
        url = f"{self._config.ollama_url.rstrip('/')}/api/embed"
        r = await self._http.post(url, json={"model": self._config.ollama_embed_model, "input": text},
                                  timeout=10.0)
        r.raise_for_status()
        return np.asarray(r.json()["embeddings"][0], dtype=np.float32)

    def stats(self) -> dict[str, object]:
        return {"backend": self.backend or self._config.embed_backend, "sie_url": self._config.sie_url,
                "sie_model": self._config.sie_model, "calls": dict(self.calls)}
