"""pion-serve's one configuration object, built once from CLI flags and PION_SERVE_* env vars.

Precedence: flag > environment (``PION_SERVE_<FIELD>``, e.g. PION_SERVE_BACKEND=ollama,
PION_SERVE_CACHE_THRESHOLD=0.9, PION_SERVE_CACHE_ENABLED=0) > default. Loading is
``pion.common.options`` (shared with pion-server and pion-llm); errors name the key and the bad value.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pion.common.errors import ConfigError
from pion.common.options import (Option, Parser, build_arg_parser, load_options, parse_bool, parse_choice,
                                 parse_float, parse_int, parse_optional_text, parse_text)
from pion.common.ports import DEFAULT_HOST, PION_LLM_PORT, PION_SERVE_PORT, PION_SERVER_PORT

BACKENDS = ("pion", "openai", "vllm", "llamacpp", "max", "ollama", "claude", "gemini")
EMBED_BACKENDS = ("auto", "pion", "sie", "ollama", "none")
# How a similarity hit is checked (issue 18, docs/proxy.md "The verifier"): the guard's
# word rules (about 1% traps but 6-8% of paraphrases served on unseen data) or WordNet +
# word-vector alignment, or a logistic score over MiniLM token alignment
# (learned_verifier.py), or a MiniLM cross-encoder reading both questions together
# (cross_verifier.py; the default since the sixth round: 61-68% of paraphrases at 0.9-1.9%
# traps on two fresh held-out splits).
VERIFIERS = ("guard", "aligned", "learned", "cross")
# The lookup threshold each verifier was measured with (docs/proxy.md): the guard needs a
# close vector because its word rules are all it has; the learned and cross verifiers read
# the pair themselves, so a lower threshold only hands them more candidates. Used when
# --cache-threshold is not given, so "--verifier cross" alone behaves as documented.
LOOKUP_THRESHOLDS = {"guard": 0.85, "aligned": 0.8, "learned": 0.65, "cross": 0.65}
ENV_PREFIX = "PION_SERVE_"


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything pion-serve needs; passed down, never a Namespace."""

    backend: str = "pion"
    backend_url: str | None = None
    model: str | None = None
    host: str = DEFAULT_HOST
    port: int = PION_SERVE_PORT
    pion_host: str = DEFAULT_HOST
    pion_port: int = PION_SERVER_PORT
    pion_password: str | None = None
    cache_threshold: float | None = None  # None: the verifier's LOOKUP_THRESHOLDS entry
    cache_enabled: bool = True
    guard_enabled: bool = True
    verifier: str = "cross"
    cache_name: str = "pion-serve"
    cache_ttl_s: float | None = None
    ollama_url: str = "http://127.0.0.1:11434"
    embed_backend: str = "auto"
    sie_url: str | None = None
    sie_model: str = "BAAI/bge-small-en-v1.5"
    ollama_embed_model: str = "nomic-embed-text"
    backend_timeout_s: float = 300.0
    pion_retry_s: float = 1.0
    # issue 17: intent routing and the L3 / L3b layers (router.py, distill.py)
    route: bool = False
    route_config: str | None = None
    route_margin: float = 0.05
    route_classifier: str | None = None
    distill: bool = False
    l3_direct_threshold: float | None = None
    l3_composite_threshold: float | None = None
    # issue 16: RAG injection (rag.py)
    rag_index: str | None = None
    rag_k: int = 3
    rag_field: str = "content"
    rag_vector_field: str = "embedding"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend: unknown backend {self.backend!r} (one of {', '.join(BACKENDS)})")
        if self.embed_backend not in EMBED_BACKENDS:
            raise ConfigError(f"embed_backend: {self.embed_backend!r} is not one of {', '.join(EMBED_BACKENDS)}")
        if self.verifier not in VERIFIERS:
            raise ConfigError(f"verifier: {self.verifier!r} is not one of {', '.join(VERIFIERS)}")
        if self.cache_threshold is None:  # filled in, so the config says which value is in use
            object.__setattr__(self, "cache_threshold", self.lookup_threshold)
        if not -1.0 <= self.lookup_threshold <= 1.0:
            raise ConfigError(f"cache_threshold: {self.cache_threshold} is not between -1 and 1")
        for key in ("port", "pion_port"):
            value = getattr(self, key)
            if not 0 < value < 65536:
                raise ConfigError(f"{key}: {value} is not a TCP port")
        if self.embed_backend == "sie" and not self.sie_url:
            raise ConfigError("embed_backend: 'sie' needs --sie-url")
        if not 1 <= self.rag_k <= 100:
            raise ConfigError(f"rag_k: {self.rag_k} is not between 1 and 100")
        if self.cache_ttl_s is not None and self.cache_ttl_s <= 0:
            raise ConfigError(f"cache_ttl_s: {self.cache_ttl_s} must be positive")
        if self.route_classifier is not None and not self.route:
            raise ConfigError("route_classifier: needs --route")
        if not 0.0 <= self.route_margin < 2.0:
            raise ConfigError(f"route_margin: {self.route_margin} is not in [0, 2)")
        for key in ("l3_direct_threshold", "l3_composite_threshold"):
            value = getattr(self, key)
            if value is not None and not -1.0 <= value <= 1.0:
                raise ConfigError(f"{key}: {value} is not between -1 and 1")

    @property
    def lookup_threshold(self) -> float:
        """The cosine an L1 candidate needs: ``cache_threshold`` as given, else the verifier's."""
        return LOOKUP_THRESHOLDS[self.verifier] if self.cache_threshold is None else self.cache_threshold

    @property
    def effective_backend_url(self) -> str | None:
        """--backend-url; for the ollama backend --ollama-url when that is unset; else
        None (the backend's own default)."""
        if self.backend_url is None and self.backend == "ollama":
            return self.ollama_url
        return self.backend_url

    @property
    def cache_active(self) -> bool:
        """Whether L1 is configured at all (it may still be down at runtime)."""
        return self.cache_enabled and self.embed_backend != "none"


def _parse_optional_float(key: str, text: str) -> float | None:
    """A float, or None for an empty value (the flag's "auto")."""
    return None if text.strip() == "" else parse_float()(key, text)


def _opt(flags: tuple[str, ...], field: str, parse: Parser, help: str, switch: str | None = None) -> Option:
    return Option(flags, field, parse, help, switch, env_prefix=ENV_PREFIX)


# Environment names follow the field (PION_SERVE_CACHE_ENABLED=0 is what --no-cache sets).
OPTIONS: list[Option] = [
    _opt(("--backend",), "backend", parse_choice(*BACKENDS),
         f"LLM backend (default: pion = pion-llm on {DEFAULT_HOST}:{PION_LLM_PORT})"),
    _opt(("--backend-url",), "backend_url", parse_optional_text, "override the backend's base URL"),
    _opt(("--model",), "model", parse_optional_text, "model passed to the backend (default: the client's model)"),
    _opt(("--host",), "host", parse_text, f"bind address (default {DEFAULT_HOST})"),
    _opt(("--port",), "port", parse_int(), f"listen port (default {PION_SERVE_PORT})"),
    _opt(("--pion-host",), "pion_host", parse_text, f"pion-server host (default {DEFAULT_HOST})"),
    _opt(("--pion-port",), "pion_port", parse_int(), f"pion-server port (default {PION_SERVER_PORT})"),
    _opt(("--pion-password",), "pion_password", parse_optional_text, "pion-server AUTH password"),
    _opt(("--cache-threshold",), "cache_threshold", parse_float(),
         "cosine threshold for L1 hits (default: the verifier's own, 0.85 for guard, 0.8 aligned, 0.65 learned"
         " and cross)"),
    _opt(("--no-cache",), "cache_enabled", parse_bool, "pure proxy: no L1 cache", switch="no"),
    _opt(("--no-guard",), "guard_enabled", parse_bool,
         "serve every hit above the threshold (A/B only: serves wrong answers)", switch="no"),
    _opt(("--verifier",), "verifier", parse_choice(*VERIFIERS),
         "how a similarity hit is checked: cross (default: hard checks + a cross-encoder, the most paraphrases"
         " at the fewest wrong answers on unseen data) | guard (word rules only) | aligned | learned"),
    _opt(("--cache-ttl",), "cache_ttl_s", parse_float(), "seconds a cached answer lives"),
    _opt(("--ollama-url",), "ollama_url", parse_text, "Ollama URL for the ollama backend and embedding fallback"),
    _opt(("--embed-backend",), "embed_backend", parse_choice(*EMBED_BACKENDS), "auto | pion | sie | ollama | none"),
    _opt(("--sie-url",), "sie_url", parse_optional_text, "superlinked/sie base URL for embeddings"),
    _opt(("--sie-model",), "sie_model", parse_text, "model sent to SIE /v1/embeddings"),
    _opt(("--route",), "route", parse_bool, "intent routing: simple/medium/complex tiers", switch="yes"),
    _opt(("--route-config",), "route_config", parse_optional_text,
         "JSON file of tiers {backend, model, [base_url], [cost_per_mtok]}"),
    _opt(("--route-margin",), "route_margin", parse_float(),
         "centroid cosine margin for simple/complex (default 0.05)"),
    _opt(("--route-classifier",), "route_classifier", parse_optional_text,
         "learned route model (.npz from `pion serve-tools train-router`) instead of the centroids"),
    _opt(("--distill",), "distill", parse_bool, "L3 concept + L3b fragment layers", switch="yes"),
    _opt(("--l3-direct-threshold",), "l3_direct_threshold", _parse_optional_float,
         "L3 direct threshold (default: auto-calibrated)"),
    _opt(("--l3-composite-threshold",), "l3_composite_threshold", _parse_optional_float,
         "L3 composite threshold (default: auto-calibrated)"),
    _opt(("--rag-index",), "rag_index", parse_optional_text,
         "pion-server FT index whose top-k documents are injected on L1 misses"),
    _opt(("--rag-k",), "rag_k", parse_int(1, 100), "documents injected per request (default 3)"),
    _opt(("--rag-field",), "rag_field", parse_text, "hash field holding a document's text (default content)"),
    _opt(("--rag-vector-field",), "rag_vector_field", parse_text, "VECTOR field searched (default embedding)"),
    _opt((), "cache_name", parse_text, "semantic-cache name in pion-server"),
    _opt((), "ollama_embed_model", parse_text, "Ollama embedding model"),
    _opt((), "backend_timeout_s", parse_float(0.0), "seconds to wait for a backend answer"),
    _opt((), "pion_retry_s", parse_float(0.0), "seconds between reconnects to a down pion-server"),
]
DESCRIPTION = "OpenAI-compatible proxy with a semantic cache in pion-server."


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for ``pion-serve`` (values stay text until ``load_config``)."""
    return build_arg_parser("pion-serve", DESCRIPTION, OPTIONS)


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> ServeConfig:
    """Parse flags over environment over defaults into a ``ServeConfig``; raises ConfigError."""
    return ServeConfig(**load_options("pion-serve", DESCRIPTION, OPTIONS, argv, env))
