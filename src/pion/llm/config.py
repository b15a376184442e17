"""pion-llm's configuration: one frozen dataclass built once from the command line and environment.

Every flag has an environment variable ``PION_LLM_<FLAG>`` (``--pion-port`` → ``PION_LLM_PION_PORT``;
booleans accept 1/true/yes/on, 0/false/no/off); a flag given on the command line wins. Loading is
``pion.common.options``, shared with pion-server and pion-serve; a bad value is a ``ConfigError``
that ``main`` prints without a traceback (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pion.codecs import get_codec
from pion.common.errors import CodecError, ConfigError
from pion.common.options import (Option, Parser, build_arg_parser, load_options, parse_bool, parse_choice,
                                 parse_float, parse_int, parse_optional_text, parse_text)
from pion.common.ports import DEFAULT_HOST, PION_LLM_PORT, PION_SERVER_PORT

DEFAULT_PORT = PION_LLM_PORT
DEFAULT_PION_PORT = PION_SERVER_PORT
# --no-pion keeps segments in this process; without a budget it would grow without bound.
DEFAULT_MEMORY_BUDGET_GB = 1.0
ENV_PREFIX = "PION_LLM_"


@dataclass(frozen=True)
class LlmConfig:
    """Effective pion-llm settings (see ``pion-llm --help``)."""

    model: str = "smollm2-135m"
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    pion_host: str = DEFAULT_HOST
    pion_port: int = DEFAULT_PION_PORT
    pion_password: str | None = None
    vquant: str = "fp16"
    pion_budget_gb: float | None = None
    no_pion: bool = False
    no_prefix_cache: bool = False
    stage2: bool = False  # restored segments attended in pion-server (ATTEND.PREFIX.*) instead of fetched
    max_queue: int = 16
    threads: int | None = None  # None: half the usable CPUs (pion.llm.main.torch_threads); 0: torch's default
    device: str | None = None
    runtime: str = "transformers"  # or "mlx" (the [mlx] extra; pion.llm.mlx_ops)
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


def _opt(flags: tuple[str, ...], field: str, parse: Parser, help: str, switch: str | None = None) -> Option:
    return Option(flags, field, parse, help, switch, env_prefix=ENV_PREFIX)


def _vquant(key: str, text: str) -> str:
    try:
        get_codec(text)  # an unknown format would fail every store later, quietly; refuse it now
    except CodecError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return text


def _in_range(low: float, high: float, low_open: bool = False) -> Parser:
    """A number in [low, high] (or (low, high] with ``low_open``); the sampling-default flags."""
    def parse(key: str, text: str) -> float:
        value = parse_float()(key, text)
        if not (low < value if low_open else low <= value) or not value <= high:
            bound = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
            raise ConfigError(f"{key}: must be in {bound}, got {text!r}")
        return value
    return parse


OPTIONS: list[Option] = [
    _opt(("--model",), "model", parse_text,
         "smollm2-135m (embedded), a local HF directory or a .gguf; also the served model id"),
    _opt(("--host",), "host", parse_text, f"bind address (default {DEFAULT_HOST})"),
    _opt(("--port",), "port", parse_int(0, 65535), f"HTTP port (default {DEFAULT_PORT})"),
    _opt(("--pion-host",), "pion_host", parse_text, f"pion-server host (default {DEFAULT_HOST})"),
    _opt(("--pion-port",), "pion_port", parse_int(1, 65535), f"pion-server port (default {DEFAULT_PION_PORT})"),
    _opt(("--pion-password",), "pion_password", parse_optional_text, "pion-server AUTH password"),
    _opt(("--vquant",), "vquant", _vquant, "storage format of segments on pion-server (fp16 default)"),
    _opt(("--pion-budget-gb",), "pion_budget_gb", parse_float(0.0),
         "keep this server's segments under this many GiB, evicting LRU leaves "
         f"(--no-pion default: {DEFAULT_MEMORY_BUDGET_GB})"),
    _opt(("--no-pion",), "no_pion", parse_bool, "keep segments in this process only (no pion-server)", "yes"),
    _opt(("--no-prefix-cache",), "no_prefix_cache", parse_bool,
         "switch prefix reuse off: every request prefills its whole prompt", "yes"),
    _opt(("--stage2",), "stage2", parse_bool,
         "attend restored segments inside pion-server (ATTEND.PREFIX.*) instead of fetching their K/V", "yes"),
    _opt(("--max-queue",), "max_queue", parse_int(0),
         "requests that may wait behind the running one; more get HTTP 429 (default 16)"),
    _opt(("--threads",), "threads", parse_int(0),
         "torch CPU threads (default: half the CPUs this process may use, at least 1, so one busy "
         "neighbour does not stall every op; 0 = torch's default, one per core)"),
    _opt(("--default-temperature",), "default_temperature", _in_range(0.0, 2.0),
         "temperature for requests that omit it (default: the model's generation config, else its "
         "per-model table entry, e.g. 0 for SmolLM2, else 1.0)"),
    _opt(("--default-top-p",), "default_top_p", _in_range(0.0, 1.0, low_open=True),
         "top_p for requests that omit it (same fallbacks; 0.9 for SmolLM2)"),
    _opt(("--device",), "device", parse_optional_text, "cpu or cuda (default: cuda if present)"),
    _opt(("--runtime",), "runtime", parse_choice("transformers", "mlx"),
         "transformers (default) or mlx (mlx-lm: Metal on Apple silicon, CPU elsewhere; the [mlx] extra)"),
    _opt(("--log-level",), "log_level", parse_choice("debug", "info", "warning", "error"),
         "debug | info (default) | warning | error"),
]
DESCRIPTION = "A local OpenAI-compatible server on the Pion prefix cache."


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for ``pion-llm`` (values stay text until ``load_config``)."""
    return build_arg_parser("pion-llm", DESCRIPTION, OPTIONS)


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> LlmConfig:
    """Flags over ``PION_LLM_*`` environment over defaults; raises ConfigError naming the key and value."""
    config = LlmConfig(**load_options("pion-llm", DESCRIPTION, OPTIONS, argv, env))
    if config.stage2 and (config.no_pion or config.no_prefix_cache):
        raise ConfigError("--stage2: needs pion-server, so not with --no-pion or --no-prefix-cache")
    if config.runtime == "mlx" and config.device is not None:
        raise ConfigError("--runtime mlx: takes no --device (MLX picks Metal or the CPU)")
    return config
