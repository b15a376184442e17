"""``pion-llm`` entry point: parse the config, then serve the app with uvicorn.

The HTTP port opens at once and answers 503 while the model loads (a first run converts the
embedded GGUF, ~20 s), so a supervisor like ``pion up`` can show progress instead of guessing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pion.common.errors import ConfigError
from pion.common.logs import setup_logging
from pion.common.options import exit_on_config_error, exit_on_missing_extra
from pion.llm.config import LlmConfig, load_config

if TYPE_CHECKING:  # torch and friends (the [llm] extra) load only once the config is good
    from pion.llm.engine import Engine, RuntimeOps

logger = logging.getLogger("pion.llm")

GRACEFUL_SHUTDOWN_S = 3


def torch_threads(requested: int | None) -> int | None:
    """The intra-op thread count pion-llm runs with; None leaves torch's default (one per core).

    Default (``requested`` None): half the CPUs this process may run on, at least 1. torch's own
    default oversubscribes as soon as anything else is busy: on 2 cores beside one busy process, 2
    threads ran a 37 + 30 token request in 56 s against 1.6 s idle (docs/benchmarks.md, "Thread
    thrash"). Half the cores leaves room for pion-server, its embedder and a neighbour.
    """
    if requested == 0:
        return None
    if requested is not None:
        return requested
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, usable // 2)


def make_engine(config: LlmConfig) -> Engine:
    """Load the model and connect the segment store the config asks for (runs in a thread)."""
    import torch

    from pion.client.runtimes.transformers_runtime import load_model
    from pion.llm.defaults import generation_config_values, resolve_generation_defaults
    from pion.llm.engine import Engine
    from pion.llm.stores import MemorySegmentStore, PionSegmentStore, SegmentStore

    threads = torch_threads(config.threads)
    if threads is not None:
        torch.set_num_threads(threads)
    logger.info("torch CPU threads: %d%s", torch.get_num_threads(),
                " (--threads to change)" if config.threads is None else "")
    logger.info("loading model %s (%s runtime)", config.model, config.runtime)
    ops = _runtime_ops(config.runtime)
    if config.runtime == "mlx":
        from pion.client.runtimes.mlx_runtime import load_model as load_mlx

        model, tokenizer = load_mlx(config.model)
        value_bytes = 4  # SegmentKV rows copied out of an fp32 mlx-lm cache
    else:
        model, tokenizer = load_model(config.model, device=config.device)
        value_bytes = next(model.parameters()).element_size()
    store: SegmentStore | None = None
    if config.runtime != "mlx" and not _segments_supported(model):
        pass
    elif config.cache_mode == "memory":
        store = MemorySegmentStore(value_bytes)
    elif config.cache_mode == "pion-server":
        store = PionSegmentStore(ops.shape(model), config.vquant, config.pion_host, config.pion_port,
                                 config.pion_password)
    defaults = resolve_generation_defaults(getattr(model, "pion_model_id", config.model),
                                           generation_config_values(model), config.default_temperature,
                                           config.default_top_p)
    logger.info("requests that omit them get %s", defaults.describe())
    budget = config.budget_bytes
    logger.info("prefix cache: %s%s", config.cache_mode,
                f", budget {budget / 1024**3:.3f} GiB" if budget is not None and store is not None else "")
    stage2 = None
    if config.stage2 and isinstance(store, PionSegmentStore):
        from pion.llm.stage2 import Stage2Restore

        stage2 = Stage2Restore(store.redis_client, ops.shape(model))
    return Engine(model, tokenizer, config.model, store, config.vquant, budget if store is not None else None,
                  generation_defaults=defaults, stage2=stage2, ops=ops)


def _runtime_ops(runtime: str) -> RuntimeOps:
    """The engine's operations for ``runtime`` (the MLX ones import mlx, only when chosen)."""
    if runtime == "mlx":
        from pion.llm.mlx_ops import MLX_OPS

        return MLX_OPS
    from pion.llm.engine import TRANSFORMERS_OPS

    return TRANSFORMERS_OPS


def _segments_supported(model: Any) -> bool:
    """Segment chains cut a cache at many token boundaries; a recurrent state exists only at the
    end of a prefill, so hybrid / SSM models are served with prefix reuse off (docs/llm.md)."""
    from pion.client.hybrid_prefix import hybrid_transport_for

    if hybrid_transport_for(model) is None:
        return True
    logger.warning("model has recurrent (SSM / linear-attention) layers: segment prefix reuse is off, "
                   "every request prefills its whole prompt")
    return False


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        return exit_on_config_error("pion-llm", exc)
    setup_logging(config.log_level)
    try:
        import uvicorn

        from pion.llm.app import create_app
    except ModuleNotFoundError as exc:
        return exit_on_missing_extra("pion-llm", "llm", exc)
    shown = dataclasses.replace(config, pion_password="***") if config.pion_password else config
    logger.info("pion-llm %s", shown)
    app = create_app(config.model, config.max_queue, lambda: make_engine(config))
    # A stream still open at SIGTERM gets a few seconds, then is cut (pion up escalates to SIGKILL at 10 s).
    uvicorn.run(app, host=config.host, port=config.port, log_level=config.log_level, access_log=False,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
