"""A prompt as a chain of segments: how pion-llm cuts, names, restores and stores prefixes.

A chat prompt is cut at message boundaries (original design, KV.PREFIX.LOOKUP: "stores a conversation as a
chain of segments"): segment 0 is the system prompt (or the template's default system plus the
first message), then one segment per later message. The generation prompt the template appends
(``<|im_start|>assistant\\n``) is the *tail*: it is always prefilled and never stored, so every
request has at least one token to run. A raw completion prompt is cut into fixed-size token chunks.

Each segment is tokenized on its own, so its token ids do not depend on what follows it. Its
namespace is derived from its parent's namespace plus its own token ids (the chain derivation of
``pion.client.namespaces``, shared with every other client)::

    root   = sha256("pion-llm|v1|<model_id>|<vquant>|L<n_layers>|D<kv_dim>")[:32]
    ns_0   = sha256(root + "|" + u32le(ids_0))[:32]
    ns_i   = sha256(ns_{i-1} + "|" + u32le(ids_i))[:32]

so a lineage is a path: two conversations that share a system prompt share ``ns_0``, and a
segment's rows (post-RoPE K and V for its own tokens only) are valid only at the absolute
positions its ancestors put it at, which is exactly where a chain restore puts it back.

Rows are held as ``SegmentKV``: per side a tensor ``[n_layers, n_kv_heads, n_tokens, head_dim]``,
the layout of ``DynamicCache.layers[i].keys`` without the batch dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pion.client.namespaces import chain_child, chain_root, model_identity
from pion.client.runtimes.transformers_kv import KvShape, dynamic_cache
from pion.codecs import get_codec
from pion.common.ids import Namespace

# Raw completion prompts are cut into chunks of this many tokens (a chat has message boundaries).
DEFAULT_CHUNK_TOKENS = 128


@dataclass(frozen=True)
class ModelShape(KvShape):
    """The client runtime's K/V geometry (``KvShape``) plus the identity that goes in namespaces.

    One geometry class serves both the prompt cache and pion-llm; this adds only what a lineage needs.
    """

    model_id: str = field(default="", kw_only=True)

    def segment_bytes(self, n_tokens: int, fmt: str = "fp16") -> int:
        """Bytes pion-server holds for one segment stored in ``fmt``: both sides, every layer.

        The codec's exact row size, so the budget matches the server's ``vstore_bytes`` for every format.
        """
        return 2 * self.n_layers * n_tokens * get_codec(fmt).row_bytes(self.kv_dim)

    @classmethod
    def of(cls, model: Any) -> ModelShape:
        from pion.client.hybrid_prefix import hybrid_transport_for  # recurrent layers: attention ones only

        hybrid = hybrid_transport_for(model)
        kv = hybrid.kv_shape if hybrid is not None else KvShape.from_config(model.config)
        return cls(kv.n_layers, kv.n_kv_heads, kv.head_dim, model_id=model_identity(model))


@dataclass
class PromptPlan:
    """A prompt's token ids as storable segments plus a tail that is always prefilled."""

    segments: list[list[int]]
    tail: list[int]

    @property
    def ids(self) -> list[int]:
        return [t for seg in self.segments for t in seg] + self.tail

    @property
    def n_tokens(self) -> int:
        return sum(len(s) for s in self.segments) + len(self.tail)


@dataclass
class SegmentKV:
    """One segment's K and V rows: ``[n_layers, n_kv_heads, n_tokens, head_dim]`` per side.

    In the model's dtype when prefilled here; fp16 views over the reply bytes when fetched from
    pion-server (converted once, while the cache is assembled).
    """

    keys: torch.Tensor
    values: torch.Tensor
    prefill_ms: float | None = None  # measured cold prefill of these tokens, when known

    @property
    def n_tokens(self) -> int:
        return int(self.keys.shape[2])


@dataclass
class ChainLink:
    """A segment's place in a lineage."""

    namespace: Namespace
    parent: Namespace | None
    n_tokens: int
    start: int  # absolute position of the segment's first token
    extra: dict[str, Any] = field(default_factory=dict)


def root_namespace(shape: ModelShape, vquant: str) -> Namespace:
    """The lineage root for one model and storage format (never stored itself)."""
    return chain_root(shape.model_id, vquant, shape.n_layers, shape.kv_dim)


def child_namespace(parent: Namespace, ids: Sequence[int]) -> Namespace:
    """A segment's namespace: its parent's namespace plus its own token ids (u32 LE)."""
    return chain_child(parent, ids)


def chain_links(root: Namespace, plan: PromptPlan) -> list[ChainLink]:
    """The namespace of every segment of ``plan``, root first."""
    links: list[ChainLink] = []
    parent: Namespace | None = None
    ns, start = root, 0
    for seg in plan.segments:
        child = child_namespace(ns, seg)
        links.append(ChainLink(child, parent, len(seg), start))
        parent, ns, start = child, child, start + len(seg)
    return links


def plan_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> PromptPlan:
    """Cut a chat prompt at message boundaries using the tokenizer's own chat template.

    The template is rendered for every message prefix; when a rendering is not a prefix of the next
    (a template that rewrites earlier turns), there are no stable cut points and nothing is reused.
    """
    renders = [tokenizer.apply_chat_template(list(messages[:i]), tokenize=False)
               for i in range(1, len(messages) + 1)]
    full = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    pieces: list[str] = []
    prev = ""
    consistent = True
    for text in renders:
        if not text.startswith(prev):
            consistent = False
            break
        pieces.append(text[len(prev):])
        prev = text
    if not consistent or not full.startswith(prev):
        pieces, prev = [], ""  # no stable cut points: the whole prompt is prefilled, nothing stored
    tail_text = full[len(prev):]

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    segments = [ids for ids in (encode(p) for p in pieces) if ids]
    tail = encode(tail_text)
    if not tail and segments:  # always keep at least one token to run
        tail = segments.pop()
    return PromptPlan(segments, tail)


def plan_text(ids: Sequence[int], chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> PromptPlan:
    """Cut raw prompt ids into whole chunks; the remainder (at least one token) is the tail.

    BPE may merge the last few tokens differently when the text is extended, so the chunk holding the
    prompt's end is never stored.
    """
    ids = list(ids)
    n_whole = max(0, (len(ids) - 1) // chunk_tokens)
    segments = [ids[i * chunk_tokens:(i + 1) * chunk_tokens] for i in range(n_whole)]
    return PromptPlan(segments, ids[n_whole * chunk_tokens:])


def cache_from_segments(model: Any, segments: Sequence[SegmentKV]) -> Any:
    """A ``DynamicCache`` holding the concatenated rows of ``segments`` (empty when there are none).

    Each layer is assembled once in a preallocated tensor: every segment's rows are converted to the
    model's dtype and transposed in the same copy, then adopted by the cache (``dynamic_cache``, the
    one assembly routine the prompt cache uses too).
    """
    param = next(model.parameters())
    if not segments:
        return dynamic_cache(model.config, [], param.dtype)
    n_layers, n_kv_heads, _, head_dim = segments[0].keys.shape
    n_total = sum(s.n_tokens for s in segments)
    layers: list[tuple[torch.Tensor, torch.Tensor]] = []
    for layer in range(int(n_layers)):
        sides = []
        for pick in (lambda s: s.keys, lambda s: s.values):
            dest = torch.empty((1, int(n_kv_heads), n_total, int(head_dim)), dtype=param.dtype)
            start = 0
            for seg in segments:
                dest[0, :, start:start + seg.n_tokens].copy_(pick(seg)[layer])
                start += seg.n_tokens
            sides.append(dest.to(param.device))
        layers.append((sides[0], sides[1]))
    return dynamic_cache(model.config, layers, param.dtype)


def segment_from_cache(cache: Any, start: int, end: int) -> SegmentKV:
    """Copy rows ``[start, end)`` of every layer out of a filled ``DynamicCache``."""
    keys = torch.stack([layer.keys[0, :, start:end] for layer in cache.layers]).clone()
    values = torch.stack([layer.values[0, :, start:end] for layer in cache.layers]).clone()
    return SegmentKV(keys, values)
