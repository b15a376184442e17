"""pion-llm's configuration: one frozen dataclass built once from the command line and environment.

Every flag has an environment variable ``PION_LLM_<FLAG>`` (``--pion-port`` → ``PION_LLM_PION_PORT``;
booleans accept 1/true/yes/on) that sets its default; a flag given on the command line wins.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pion.codecs import get_codec
from pion.common.errors import CodecError, ConfigError

DEFAULT_PORT = 8322
DEFAULT_PION_PORT = 1974
# --no-pion keeps segments in this process; without a budget it would grow without bound.
DEFAULT_MEMORY_BUDGET_GB = 1.0
ENV_PREFIX = "PION_LLM_"


@dataclass(frozen=True)
class LlmConfig:
    """Effective pion-llm settings (see ``pion-llm --help``)."""

    model: str = "smollm2-135m"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    pion_host: str = "127.0.0.1"
    pion_port: int = DEFAULT_PION_PORT
    pion_password: str | None = None
    vquant: str = "fp16"
    pion_budget_gb: float | None = None
    no_pion: bool = False
    no_prefix_cache: bool = False
    max_queue: int = 16
    threads: int | None = None  # None: half the usable CPUs (pion.llm.main.torch_threads); 0: torch's default
    device: str | None = None
    default_temperature: float | None = None  # None: the model's own default (see pion.llm.defaults)
    default_top_p: float | None = None
    log_level: str = "info"

    @property
    def budget_bytes(self) -> int | None:
        """The segment byte budget; --no-pion gets a default so memory stays bounded."""
        gb = self.pion_budget_gb
        if gb is None and self.no_pion:
            gb = DEFAULT_MEMORY_BUDGET_GB
        return None if gb is None else int(gb * 1024**3)

    @property
    def cache_mode(self) -> str:
        if self.no_prefix_cache:
            return "off"
        return "memory" if self.no_pion else "pion-server"


def _env_bool(name: str) -> bool:
    raw = os.environ.get(name, "")
    if raw.lower() in ("", "0", "false", "no", "off"):
        return False
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name}: expected a boolean (1/0, true/false), got {raw!r}")


def _positive(kind: type[int] | type[float], key: str, minimum: float) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{key}: expected a {kind.__name__}, got {text!r}") from exc
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{key}: must be >= {minimum}, got {text!r}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _in_range(key: str, low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{key}: expected a number, got {text!r}") from exc
        if not (low < value if low_open else low <= value) or not value <= high:
            bound = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
            raise argparse.ArgumentTypeError(f"{key}: must be in {bound}, got {text!r}")
        return value
    parse.__name__ = "float"
    return parse


def build_parser() -> argparse.ArgumentParser:
    d = LlmConfig()
    env = os.environ.get
    p = argparse.ArgumentParser(prog="pion-llm", description="A local OpenAI-compatible server on the Pion "
                                "prefix cache. Each flag's default can be set with PION_LLM_<FLAG>.")
    p.add_argument("--model", default=env("PION_LLM_MODEL", d.model),
                   help="smollm2-135m (embedded), a local HF directory or a .gguf; also the served model id")
    p.add_argument("--host", default=env("PION_LLM_HOST", d.host))
    p.add_argument("--port", type=_positive(int, "--port", 0), default=env("PION_LLM_PORT", d.port))
    p.add_argument("--pion-host", default=env("PION_LLM_PION_HOST", d.pion_host))
    p.add_argument("--pion-port", type=_positive(int, "--pion-port", 1),
                   default=env("PION_LLM_PION_PORT", d.pion_port))
    p.add_argument("--pion-password", default=env("PION_LLM_PION_PASSWORD", d.pion_password))
    p.add_argument("--vquant", default=env("PION_LLM_VQUANT", d.vquant),
                   help="storage format of segments on pion-server (fp16 default)")
    p.add_argument("--pion-budget-gb", type=_positive(float, "--pion-budget-gb", 0.0),
                   default=env("PION_LLM_PION_BUDGET_GB", d.pion_budget_gb),
                   help="keep this server's segments under this many GiB, evicting LRU leaves "
                        f"(--no-pion default: {DEFAULT_MEMORY_BUDGET_GB})")
    p.add_argument("--no-pion", action="store_true", default=_env_bool("PION_LLM_NO_PION"),
                   help="keep segments in this process only (no pion-server)")
    p.add_argument("--no-prefix-cache", action="store_true", default=_env_bool("PION_LLM_NO_PREFIX_CACHE"),
                   help="switch prefix reuse off: every request prefills its whole prompt")
    p.add_argument("--max-queue", type=_positive(int, "--max-queue", 0), default=env("PION_LLM_MAX_QUEUE", d.max_queue),
                   help="requests that may wait behind the running one; more get HTTP 429")
    p.add_argument("--threads", type=_positive(int, "--threads", 0), default=env("PION_LLM_THREADS", d.threads),
                   help="torch CPU threads (default: half the CPUs this process may use, at least 1, so one "
                        "busy neighbour does not stall every op; 0 = torch's default, one per core)")
    p.add_argument("--device", default=env("PION_LLM_DEVICE", d.device), help="cpu or cuda (default: cuda if present)")
    p.add_argument("--default-temperature", type=_in_range("--default-temperature", 0.0, 2.0),
                   default=env("PION_LLM_DEFAULT_TEMPERATURE", d.default_temperature),
                   help="temperature for requests that omit it (default: the model's generation config, "
                        "else its model card's value, e.g. 0.2 for SmolLM2, else 1.0)")
    p.add_argument("--default-top-p", type=_in_range("--default-top-p", 0.0, 1.0, low_open=True),
                   default=env("PION_LLM_DEFAULT_TOP_P", d.default_top_p),
                   help="top_p for requests that omit it (same fallbacks; 0.9 for SmolLM2)")
    p.add_argument("--log-level", default=env("PION_LLM_LOG_LEVEL", d.log_level),
                   choices=["debug", "info", "warning", "error"])
    return p


def load_config(argv: Sequence[str] | None = None) -> LlmConfig:
    """Parse the command line (env supplies defaults); exits with usage on a bad value.

    argparse converts string defaults with the flag's type, so a bad env value is reported like a bad flag.
    """
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        get_codec(ns.vquant)  # an unknown format would fail every store later, quietly; refuse it now
    except CodecError as exc:
        parser.error(f"--vquant: {exc}")
    return LlmConfig(**vars(ns))
