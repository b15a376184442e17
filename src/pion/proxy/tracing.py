"""TorchScript for pion-serve's one-question (or one-pair) hit path, kept only when it is exact.

Why: tracing a transformers module removes the Python of its layers, about 10% of a pass on
this CPU, and a cache hit runs one unpadded input through MiniLM (``token_align``) or the
cross-encoder (``cross_encoder``). A trace records one input's control flow, so it is checked
against the eager module on inputs of other lengths and discarded (None: eager everywhere)
when tracing fails or any output differs; padded batches always run eager.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def trace_checked(module: Any, example: tuple[Any, ...], probes: Sequence[tuple[Any, ...]],
                  tolerance: float = 1e-4) -> Any:
    """``torch.jit.trace(module, example)`` if it matches ``module`` within ``tolerance`` on
    every input tuple in ``probes``; None otherwise."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings: shape-dependent Python branches
            with torch.no_grad():
                traced = torch.jit.trace(module, example, check_trace=False, strict=False)
            with torch.inference_mode():
                for inputs in probes:
                    want, got = module(*inputs), traced(*inputs)
                    if got.shape != want.shape or float((got - want).abs().max()) > tolerance:
                        return None
    except Exception:  # noqa: BLE001 - a failed trace only costs the speed-up
        return None
    return traced
