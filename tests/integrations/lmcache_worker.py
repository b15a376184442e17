"""One LMCache engine on CPU, run by the integration tests inside the lmcache venv (a subprocess).

Why a subprocess with a timeout: LMCache 0.5.6 has shutdown hangs that reproduce against Redis
too (RedisConnector.close() can deadlock, the job-queue shutdown can hang), so the worker never
closes its engine: it prints one JSON line and leaves with ``os._exit``.

The serving engine's side is ``TensorKvConnector``: the request's K/V is one contiguous CPU tensor
``[2, n_layers, n_tokens, kv_dim]`` (kwargs ``kv``), copied chunk by chunk to and from LMCache's
memory objects — the same copies vLLM's paged connector does, without a GPU.

    python lmcache_worker.py store    --url pion://127.0.0.1:PORT --tokens 1024 --seed 7
    python lmcache_worker.py retrieve --url pion://127.0.0.1:PORT --tokens 1024 --seed 7
    (``--url redis://127.0.0.1:PORT`` uses LMCache's own RedisConnector: opaque SET/GET values)

Output (stdout, last line): {"mode", "chunks", "stored_tokens" | "retrieved_tokens", "bit_exact",
"seconds", "lookup_tokens"}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import torch
from lmcache.v1.cache_engine import LMCacheEngineBuilder
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.gpu_connector.gpu_connectors import GPUConnectorInterface
from lmcache.v1.metadata import LMCacheMetadata

MODEL = "pion-test/tiny-llama"


class TensorKvConnector(GPUConnectorInterface):
    """K/V of one request as a ``[2, L, T, kv_dim]`` CPU tensor passed as ``kv=``."""

    def __init__(self, n_layers: int, kv_dim: int) -> None:
        self.n_layers, self.kv_dim = n_layers, kv_dim

    def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        memory_obj.tensor.copy_(kwargs["kv"][:, :, start:end])

    def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        kwargs["kv"][:, :, start:end].copy_(memory_obj.tensor)

    def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> None:
        for obj, start, end in zip(memory_objs, starts, ends):
            self.from_gpu(obj, start, end, **kwargs)

    def batched_to_gpu(self, memory_objs: Any = None, starts: Any = None, ends: Any = None, **kwargs: Any) -> None:
        for obj, start, end in zip(memory_objs, starts, ends):
            self.to_gpu(obj, start, end, **kwargs)

    def get_shape(self, num_tokens: int) -> torch.Size:
        return torch.Size([2, self.n_layers, num_tokens, self.kv_dim])


def make_engine(url: str, chunk_size: int, vquant: str, dtype: torch.dtype, geometry: tuple[int, int, int]) -> Any:
    n_layers, n_kv_heads, head_dim = geometry
    extra: dict[str, Any] = {}
    settings: dict[str, Any] = {"chunk_size": chunk_size, "local_cpu": False, "max_local_cpu_size": 0.5,
                                "remote_serde": "naive", "save_unfull_chunk": False}
    if url.startswith("pion://"):
        settings["remote_storage_plugins"] = ["pion"]
        extra = {"remote_storage_plugin.pion.module_path": "pion.integrations.lmcache",
                 "remote_storage_plugin.pion.class_name": "PionConnectorAdapter",
                 "remote_storage_plugin.pion.url": url, "remote_storage_plugin.pion.vquant": vquant}
    else:
        settings["remote_url"] = url
    config = LMCacheEngineConfig.from_defaults(extra_config=extra or None, **settings)
    metadata = LMCacheMetadata(model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                               kv_dtype=dtype, kv_shape=(n_layers, 2, chunk_size, n_kv_heads, head_dim),
                               chunk_size=chunk_size)
    connector = TensorKvConnector(n_layers, n_kv_heads * head_dim)
    engine = LMCacheEngineBuilder.get_or_create("pion-test", config, metadata, connector,
                                                lambda t, r: None, lambda o, r: o)
    engine.post_init()
    return engine


def request(n_tokens: int, seed: int, dtype: torch.dtype, geometry: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic token ids and K/V for a request (the same in every process)."""
    n_layers, n_kv_heads, head_dim = geometry
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 32000, (n_tokens,), generator=gen)
    kv = torch.randn(2, n_layers, n_tokens, n_kv_heads * head_dim, generator=gen).to(dtype)
    return tokens, kv


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["store", "retrieve"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--shared", type=int, default=None, help="retrieve: tokens shared with the stored request")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--vquant", default="auto")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--wait-s", type=float, default=30.0)
    parser.add_argument("--geometry", default="4,2,64", help="n_layers,n_kv_heads,head_dim")
    parser.add_argument("--repeat", type=int, default=1, help="retrieve: times (median seconds reported)")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    layers, heads, head_dim = (int(x) for x in args.geometry.split(","))
    geometry = (layers, heads, head_dim)
    engine = make_engine(args.url, args.chunk_size, args.vquant, dtype, geometry)
    tokens, kv = request(args.tokens, args.seed, dtype, geometry)
    out: dict[str, Any] = {"mode": args.mode}
    if args.mode == "store":
        start = time.perf_counter()
        engine.store(tokens, kv=kv)
        expected = args.tokens - args.tokens % args.chunk_size
        deadline = time.monotonic() + args.wait_s
        while engine.lookup(tokens) < expected and time.monotonic() < deadline:  # puts are asynchronous
            time.sleep(0.02)
        out["seconds"] = time.perf_counter() - start
        out["lookup_tokens"] = int(engine.lookup(tokens))
    else:
        if args.shared is not None:  # a request whose first `shared` tokens match the stored one
            other, _ = request(args.tokens, args.seed + 1000, dtype, geometry)
            tokens = torch.cat([tokens[:args.shared], other[args.shared:]])
        out["lookup_tokens"] = int(engine.lookup(tokens))
        times = []
        for _ in range(args.repeat):  # the local CPU tier is off: every retrieve reads the remote
            dst = torch.zeros_like(kv)
            start = time.perf_counter()
            mask = engine.retrieve(tokens, kv=dst)
            times.append(time.perf_counter() - start)
        out["seconds"] = statistics.median(times)
        n = int(mask.sum().item())
        out["retrieved_tokens"] = n
        bits = torch.int32 if dtype == torch.float32 else torch.int16
        out["bit_exact"] = bool(n > 0 and torch.equal(dst[:, :, :n].view(bits), kv[:, :, :n].view(bits)))
        out["max_abs_err"] = float((dst[:, :, :n].float() - kv[:, :, :n].float()).abs().max()) if n else None
    print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
