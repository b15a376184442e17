"""Cache namespaces: the key under which a prefix's K/V is shared.

The spec's contract: a namespace must encode every load-bearing piece of execution context,
because a mismatch is silent corruption, not an error. ``make_namespace`` is the spec's
function; ``model_fingerprint`` collects the pieces that ``PionPromptCache.namespace_for``
derives by itself so nobody has to remember them.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from typing import Any

from pion.common.ids import Namespace

NAMESPACE_VERSION = "pion-prefix-v1"


def make_namespace(*parts: object) -> Namespace:
    """sha256("|".join(parts)) as 32 hex characters (the spec's ``make_namespace``)."""
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


def model_fingerprint(model: Any, tokenizer: Any | None) -> tuple[str, ...]:
    """Every part of a namespace that comes from the model: identity, config, tokenizer, rope, dtype."""
    identity = getattr(model, "pion_model_id", None) or getattr(model.config, "_name_or_path", "") or "unnamed"
    dtype = str(next(model.parameters()).dtype)
    return (f"model={identity}", f"config={config_hash(model.config)}", f"tokenizer={tokenizer_hash(tokenizer)}",
            f"rope={rope_settings(model.config)}", f"dtype={dtype}")
