"""pion-serve's one configuration object, built once from CLI flags and PION_SERVE_* env vars.

Precedence: flag > environment (``PION_SERVE_<FLAG>``, e.g. PION_SERVE_BACKEND=ollama,
PION_SERVE_CACHE_THRESHOLD=0.9) > default. Errors name the key and the bad value.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from pion.common.errors import ConfigError

BACKENDS = ("pion", "openai", "vllm", "llamacpp", "max", "ollama", "claude", "gemini")
EMBED_BACKENDS = ("auto", "pion", "sie", "ollama", "none")
# How a similarity hit is checked (issue 18, docs/proxy.md "The verifier"): the guard's
# word rules (default: 0% traps on unseen data) or WordNet + word-vector alignment.
VERIFIERS = ("guard", "aligned")
ENV_PREFIX = "PION_SERVE_"


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything pion-serve needs; passed down, never a Namespace."""

    backend: str = "pion"
    backend_url: str | None = None
    model: str | None = None
    host: str = "127.0.0.1"
    port: int = 8321
    pion_host: str = "127.0.0.1"
    pion_port: int = 1974
    pion_password: str | None = None
    cache_threshold: float = 0.85
    cache_enabled: bool = True
    guard_enabled: bool = True
    verifier: str = "guard"
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
    distill: bool = False
    l3_direct_threshold: float | None = None
    l3_composite_threshold: float | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend: unknown backend {self.backend!r} (one of {', '.join(BACKENDS)})")
        if self.embed_backend not in EMBED_BACKENDS:
            raise ConfigError(f"embed_backend: {self.embed_backend!r} is not one of {', '.join(EMBED_BACKENDS)}")
        if self.verifier not in VERIFIERS:
            raise ConfigError(f"verifier: {self.verifier!r} is not one of {', '.join(VERIFIERS)}")
        if not -1.0 <= self.cache_threshold <= 1.0:
            raise ConfigError(f"cache_threshold: {self.cache_threshold} is not between -1 and 1")
        for key in ("port", "pion_port"):
            value = getattr(self, key)
            if not 0 < value < 65536:
                raise ConfigError(f"{key}: {value} is not a TCP port")
        if self.embed_backend == "sie" and not self.sie_url:
            raise ConfigError("embed_backend: 'sie' needs --sie-url")
        if self.cache_ttl_s is not None and self.cache_ttl_s <= 0:
            raise ConfigError(f"cache_ttl_s: {self.cache_ttl_s} must be positive")
        if not 0.0 <= self.route_margin < 2.0:
            raise ConfigError(f"route_margin: {self.route_margin} is not in [0, 2)")
        for key in ("l3_direct_threshold", "l3_composite_threshold"):
            value = getattr(self, key)
            if value is not None and not -1.0 <= value <= 1.0:
                raise ConfigError(f"{key}: {value} is not between -1 and 1")

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pion-serve", description="OpenAI-compatible proxy with a semantic cache in pion-server.")
    p.add_argument("--backend", choices=BACKENDS, help="LLM backend (default: pion = pion-llm on 127.0.0.1:8322)")
    p.add_argument("--backend-url", help="override the backend's base URL")
    p.add_argument("--model", help="model passed to the backend (default: the client's model)")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8321)")
    p.add_argument("--pion-host", help="pion-server host (default 127.0.0.1)")
    p.add_argument("--pion-port", type=int, help="pion-server port (default 1974)")
    p.add_argument("--pion-password", help="pion-server AUTH password")
    p.add_argument("--cache-threshold", type=float, help="cosine threshold for L1 hits (default 0.85)")
    p.add_argument("--no-cache", action="store_true", default=None, help="pure proxy: no L1 cache")
    p.add_argument("--no-guard", action="store_true", default=None,
                   help="serve every hit above the threshold (A/B only: serves wrong answers)")
    p.add_argument("--verifier", choices=VERIFIERS,
                   help="how a similarity hit is checked: guard (default) | aligned (more paraphrases served)")
    p.add_argument("--cache-ttl", type=float, dest="cache_ttl_s", help="seconds a cached answer lives")
    p.add_argument("--ollama-url", help="Ollama URL for the ollama backend and embedding fallback")
    p.add_argument("--embed-backend", choices=EMBED_BACKENDS, help="auto | pion | sie | ollama | none")
    p.add_argument("--sie-url", help="superlinked/sie base URL for embeddings")
    p.add_argument("--sie-model", help="model sent to SIE /v1/embeddings")
    p.add_argument("--route", action="store_true", default=None, help="intent routing: simple/medium/complex tiers")
    p.add_argument("--route-config", help="JSON file of tiers {backend, model, [base_url], [cost_per_mtok]}")
    p.add_argument("--route-margin", type=float, help="centroid cosine margin for simple/complex (default 0.05)")
    p.add_argument("--distill", action="store_true", default=None, help="L3 concept + L3b fragment layers")
    p.add_argument("--l3-direct-threshold", type=float, help="L3 direct threshold (default: auto-calibrated)")
    p.add_argument("--l3-composite-threshold", type=float, help="L3 composite threshold (default: auto-calibrated)")
    return p


def _from_env(env: Mapping[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in fields(ServeConfig):
        raw = env.get(ENV_PREFIX + f.name.upper())
        if raw is None:
            continue
        kind = str(f.type)
        try:
            if "bool" in kind:
                if raw.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(raw)
                out[f.name] = raw.lower() in ("1", "true", "yes", "on")
            elif kind.startswith("int"):
                out[f.name] = int(raw)
            elif kind.startswith("float"):
                out[f.name] = float(raw)
            else:
                out[f.name] = raw
        except ValueError:
            raise ConfigError(f"{ENV_PREFIX}{f.name.upper()}: bad value {raw!r}") from None
    return out


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> ServeConfig:
    """Parse flags over environment over defaults into a ``ServeConfig``."""
    args = build_parser().parse_args(argv)
    values = _from_env(os.environ if env is None else env)
    for name, value in vars(args).items():
        if value is None:
            continue
        if name == "no_cache":
            values["cache_enabled"] = not value
        elif name == "no_guard":
            values["guard_enabled"] = not value
        else:
            values[name] = value
    return ServeConfig(**values)  # type: ignore[arg-type]
