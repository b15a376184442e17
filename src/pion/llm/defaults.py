"""Sampling defaults for requests that omit ``temperature`` / ``top_p``.

Why: the OpenAI API's defaults are temperature 1 and top-p 1, tuned for large models. A 135M
model sampled at temperature 1 answers "What is the capital of France?" with noise. vLLM applies
the model's own ``generation_config.json`` when a request omits a value (``--generation-config
auto``); llama.cpp and Ollama ship per-model defaults. pion-llm does both, first match wins:

1. ``--default-temperature`` / ``--default-top-p`` (the operator's choice);
2. the model's ``generation_config.json`` — only values it sets explicitly;
3. ``MODEL_TABLE``, by model family. SmolLM2's model card samples with temperature 0.2 and top-p
   0.9 (https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct, "How to use":
   ``model.generate(inputs, max_new_tokens=50, temperature=0.2, top_p=0.9, do_sample=True)``); its
   ``generation_config.json`` sets no sampling value, so this row is what applies. The row keeps the
   card's top-p but uses greedy decoding (temperature 0): on our factual eval set
   (``benchmarks/sampling_defaults_eval.py``, chosen on dev) greedy scored 75 % against the card's
   73 % for the embedded Q4_1 build, and a sampled answer sometimes derails into a loop ("la femme,
   la femme, ...") where greedy answers the README's question the same right way every time;
4. OpenAI's 1.0 / 1.0.

Each value is resolved on its own, so ``--default-temperature 0`` keeps the table's top-p.
A request that sends a value (or ``null``, which means "the default") always decides for itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OPENAI_TEMPERATURE = 1.0
OPENAI_TOP_P = 1.0


@dataclass(frozen=True)
class ModelSampling:
    """Default sampling for a model family, and where each value comes from."""

    temperature: float
    top_p: float
    temperature_source: str
    top_p_source: str


# Keyed by a lower-case prefix of the model id (``smollm2-135m``, a GGUF stem, a directory name).
SMOLLM2_CARD = "SmolLM2 model card (huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct)"
SMOLLM2_EVAL = "pion eval, greedy beat the card's 0.2 on dev (docs/benchmarks.md)"
MODEL_TABLE: dict[str, ModelSampling] = {
    "smollm2": ModelSampling(0.0, 0.9, SMOLLM2_EVAL, SMOLLM2_CARD),
}


@dataclass(frozen=True)
class GenerationDefaults:
    """What a request gets for an omitted ``temperature`` / ``top_p``, and why (for the log)."""

    temperature: float = OPENAI_TEMPERATURE
    top_p: float = OPENAI_TOP_P
    temperature_source: str = "OpenAI default"
    top_p_source: str = "OpenAI default"

    def describe(self) -> str:
        return (f"temperature {self.temperature:g} ({self.temperature_source}), "
                f"top_p {self.top_p:g} ({self.top_p_source})")


def table_entry(model_id: str) -> ModelSampling | None:
    """The ``MODEL_TABLE`` row whose prefix matches ``model_id`` (case-insensitive), if any."""
    name = model_id.lower().rsplit("/", 1)[-1]
    for prefix, entry in MODEL_TABLE.items():
        if name.startswith(prefix):
            return entry
    return None


def generation_config_values(model: Any) -> dict[str, float]:
    """``temperature`` / ``top_p`` that the model's generation config sets explicitly.

    ``GenerationConfig`` reports 1.0 for fields the file never mentions; ``to_diff_dict`` keeps
    only the values that differ from those class defaults, as vLLM does.
    """
    config = getattr(model, "generation_config", None)
    if config is None or not hasattr(config, "to_diff_dict"):
        return {}
    diff = config.to_diff_dict()
    return {k: float(diff[k]) for k in ("temperature", "top_p") if isinstance(diff.get(k), (int, float))}


def resolve_generation_defaults(model_id: str, from_model: dict[str, float],
                                temperature: float | None = None,
                                top_p: float | None = None) -> GenerationDefaults:
    """Apply the precedence in the module docstring to each value separately.

    Args:
        model_id: the served model's id, matched against ``MODEL_TABLE``.
        from_model: what ``generation_config_values`` found in the model's generation config.
        temperature, top_p: ``--default-temperature`` / ``--default-top-p`` (None when not given).
    """
    entry = table_entry(model_id)
    t, t_src = _pick(temperature, from_model.get("temperature"),
                     (entry.temperature, entry.temperature_source) if entry else None, OPENAI_TEMPERATURE)
    p, p_src = _pick(top_p, from_model.get("top_p"), (entry.top_p, entry.top_p_source) if entry else None,
                     OPENAI_TOP_P)
    return GenerationDefaults(t, p, t_src, p_src)


def _pick(flag: float | None, model_value: float | None, table: tuple[float, str] | None,
          openai: float) -> tuple[float, str]:
    if flag is not None:
        return flag, "command line"
    if model_value is not None:
        return model_value, "the model's generation_config.json"
    if table is not None:
        return table
    return openai, "OpenAI default"
