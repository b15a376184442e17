"""Cache namespaces: the key under which a prefix's K/V is shared.

A namespace must encode every load-bearing piece of execution context, because a mismatch is
silent corruption, not an error. Three derivations, all versioned by ``NAMESPACE_VERSION`` (the
version of this module's derivation rules; bumping it orphans every stored prefix on purpose):

* a whole prefix (``PionPromptCache.namespace_for``)::

      make_namespace("pion-prefix-v1", "model=<id>", "config=<h>", "tokenizer=<h>", "rope=<json>",
                     "dtype=<torch dtype>", "format=<vquant>/bp<n>", "tokens=<sha256 of u32le ids>", *extra)

  (a model with recurrent layers puts ``"layout=<A|R|B|- per layer>"`` between the tokens and ``extra``;
  ``pion.client.hybrid_prefix``)

* a chain of segments (pion-llm; ``pion.llm.segments`` says where the cuts are)::

      root = sha256("pion-llm|v1|<model id>|<vquant>|L<n_layers>|D<kv_dim>")[:32]
      ns_i = sha256(ns_{i-1} + "|" + u32le(ids_i))[:32]          (ns_{-1} = root)

* a RAG chunk (``HybridRetrievalCache.namespace_for``; keyed by the chunk id, not its tokens)::

      make_namespace("pion-rag-v1", "model=<id>", …, "dtype=<torch dtype>", "format=<vquant>",
                     "kind=chunk|pack", "stub=<stub token hash or ->", "id=<sha256 of the chunk id>")

``model_identity`` is the one answer to "which model is this" for all of them.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from typing import Any

from pion.common.ids import Namespace

NAMESPACE_VERSION = 1
PREFIX_TAG = f"pion-prefix-v{NAMESPACE_VERSION}"  # first part of a whole-prefix namespace
CHAIN_TAG = f"pion-llm|v{NAMESPACE_VERSION}"  # start of a chain root's hashed text
RAG_TAG = f"pion-rag-v{NAMESPACE_VERSION}"  # first part of a RAG chunk's namespace (HybridRetrievalCache)


def make_namespace(*parts: object) -> Namespace:
    """sha256("|".join(parts)) as 32 hex characters (the original design's ``make_namespace``)."""
    return Namespace(hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:32])


def _short_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def config_hash(config: Any) -> str:
    """Hash of the model config's architecture fields (the JSON ``to_dict`` gives, sorted)."""
    fields = dict(config.to_dict())
    # Paths and library versions do not change the computed K/V.
    for volatile in ("_name_or_path", "transformers_version", "_commit_hash", "dtype", "torch_dtype"):
        fields.pop(volatile, None)
    return _short_hash(json.dumps(fields, sort_keys=True, default=str).encode())


def rope_settings(config: Any) -> str:
    """RoPE theta and scaling, whichever attribute names this transformers version uses."""
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    params = getattr(text, "rope_parameters", None)
    if params is None:
        params = {"rope_theta": getattr(text, "rope_theta", None), "rope_scaling": getattr(text, "rope_scaling", None)}
    return json.dumps(params, sort_keys=True, default=str)


def tokenizer_hash(tokenizer: Any | None) -> str:
    """Hash of the vocabulary and special tokens, or ``"none"`` when no tokenizer was given."""
    if tokenizer is None:
        return "none"
    vocab = sorted(tokenizer.get_vocab().items())
    specials = sorted(str(t) for t in tokenizer.all_special_tokens)
    return _short_hash(json.dumps([vocab, specials]).encode())


def tokens_hash(token_ids: Sequence[int]) -> str:
    """Hash of the prefix token ids themselves (u32 little-endian)."""
    return hashlib.sha256(struct.pack(f"<{len(token_ids)}I", *token_ids)).hexdigest()


def model_identity(model: Any) -> str:
    """The model's name in namespaces: ``pion.load_model``'s ``pion_model_id`` (name + weights hash),
    else the path it was loaded from, else ``"unnamed"`` (a model built in memory from a config;
    the config hash in a prefix namespace and the geometry in a chain root still tell such models apart).
    """
    return str(getattr(model, "pion_model_id", None) or getattr(model.config, "_name_or_path", "") or "unnamed")


def model_fingerprint(model: Any, tokenizer: Any | None) -> tuple[str, ...]:
    """Every part of a namespace that comes from the model: identity, config, tokenizer, rope, dtype."""
    dtype = str(next(model.parameters()).dtype)
    return (f"model={model_identity(model)}", f"config={config_hash(model.config)}", f"tokenizer={tokenizer_hash(tokenizer)}",
            f"rope={rope_settings(model.config)}", f"dtype={dtype}")


def prefix_namespace(fingerprint: Sequence[str], format_descriptor: str, token_ids: Sequence[int],
                     *extra: object) -> Namespace:
    """The namespace of a whole prefix (see the module docstring)."""
    return make_namespace(PREFIX_TAG, *fingerprint, f"format={format_descriptor}",
                          f"tokens={tokens_hash(list(token_ids))}", *extra)


def chain_root(model_id: str, fmt: str, n_layers: int, kv_dim: int) -> Namespace:
    """The root of a segment chain for one model and storage format (never stored itself)."""
    text = f"{CHAIN_TAG}|{model_id}|{fmt}|L{n_layers}|D{kv_dim}"
    return Namespace(hashlib.sha256(text.encode()).hexdigest()[:32])


def chain_child(parent: Namespace, token_ids: Sequence[int]) -> Namespace:
    """A segment's namespace: its parent's namespace plus its own token ids (u32 LE)."""
    digest = hashlib.sha256(parent.encode() + b"|" + struct.pack(f"<{len(token_ids)}I", *token_ids))
    return Namespace(digest.hexdigest()[:32])
