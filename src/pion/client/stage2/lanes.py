"""The three ways a stage-2 layer attends over its prefix, fastest first.

  * ``InprocLane`` — this process prefilled the prefix and still holds its K/V tensors: the
    same kernels the server runs (prefix attention with LSE, local causal attention, merge) run
    here with no wire call.
  * ``WireLane`` over the binary lane (port+1) or RESP — one ``QUERY_FUSED`` per layer and
    forward: Q and the local K/V go out, the merged output comes back. A ``COLDMISS`` triggers
    ``KV.PREFIX.WARM`` and one retry, counted in ``Stage2Counters.cold_rehydrates_observed``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from pion.client.runtimes.transformers_kv import frombuffer
from pion.client.stage2.wire import ColdMissError
from pion.server.attention.dense import attend, causal_mask
from pion.server.attention.merge import merge

QueryFn = Callable[[int, np.ndarray, np.ndarray, np.ndarray], bytes]


@dataclass
class Stage2Counters:
    """Per-PionPromptCache stage-2 telemetry."""

    wire_calls: int = 0
    inproc_calls: int = 0
    cold_rehydrates_observed: int = 0


def _fp32_numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()


def query_rehydrating(query_fn: QueryFn, rehydrate: Callable[[], None], counters: Stage2Counters,
                      layer_idx: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> bytes:
    """One wire QUERY_FUSED, counted; a -COLDMISS rehydrates the prefix and retries once
    (shared by the transformers and the MLX wire lanes)."""
    counters.wire_calls += 1
    try:
        return query_fn(layer_idx, q, k, v)
    except ColdMissError:
        counters.cold_rehydrates_observed += 1
        rehydrate()
        return query_fn(layer_idx, q, k, v)


class InprocLane:
    """Prefix K/V ``[H_kv, P, D]`` per layer held in this process."""

    def __init__(self, prefix_kv: list[tuple[torch.Tensor, torch.Tensor]], counters: Stage2Counters) -> None:
        self.prefix_kv = prefix_kv
        self.counters = counters

    def attend(self, layer_idx: int, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               scaling: float, local_mask: torch.Tensor | None) -> torch.Tensor:
        self.counters.inproc_calls += 1
        q = query[0]
        m, s = q.shape[1], keys.shape[2]
        pk, pv = self.prefix_kv[layer_idx]
        prefix = attend(q, pk.to(q.dtype), pv.to(q.dtype), scaling)
        mask = local_mask if local_mask is not None else (causal_mask(m, s, q.device)[0] if m > 1 else None)
        local = attend(q, keys[0], values[0], scaling, None if mask is None else mask[None])
        out, _ = merge(prefix[0], prefix[1], local[0], local[1])
        return out[None].to(query.dtype)


class WireLane:
    """Attention served by pion-server; ``query_fn`` is one QUERY_FUSED over RESP or the binary lane."""

    def __init__(self, sid: str, query_fn: QueryFn, rehydrate: Callable[[], None], counters: Stage2Counters) -> None:
        self.sid = sid
        self.query_fn = query_fn
        self.rehydrate = rehydrate
        self.counters = counters

    def attend(self, layer_idx: int, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               scaling: float, local_mask: torch.Tensor | None) -> torch.Tensor:
        # The server scales by 1/sqrt(D) and masks the suffix causally; a model with another
        # scale gets Q pre-multiplied, and transformers' causal mask is what the server applies.
        h_q, m, d = query.shape[1:]
        factor = scaling * d ** 0.5
        q = query[0] if abs(factor - 1.0) < 1e-12 else query[0] * factor
        reply = query_rehydrating(self.query_fn, self.rehydrate, self.counters, layer_idx, _fp32_numpy(q),
                                  _fp32_numpy(keys[0]), _fp32_numpy(values[0]))
        out = frombuffer(reply, torch.float32).view(1, h_q, m, d)
        return out.to(device=query.device, dtype=query.dtype)
