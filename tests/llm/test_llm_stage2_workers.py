"""pion-llm ``--stage2`` under ``pion-server -w 2``: a chain whose segments live on different workers
is made warm on each segment's owner (one redirect) and attended with one pipeline per owner; the
attention output equals, bit for bit, that of the same chain held by a single-process server."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import redis
import torch

from pion.common.ids import Namespace
from pion.llm.segments import ChainLink, ModelShape
from pion.llm.stage2 import Stage2Restore
from support.procs import ServerProcess, start_server
from support.workers import WorkerGroup, start_workers

SHAPE = ModelShape(2, 2, 4, model_id="tiny")  # 2 layers, 2 KV heads, head_dim 4
TOKENS = 3


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGroup, ServerProcess]]:
    base = tmp_path_factory.mktemp("llm-s2w")
    group = start_workers(base / "workers", 2)
    try:
        single = start_server(base / "single")
        try:
            yield group, single
        finally:
            single.stop()
    finally:
        group.server.stop()


def store_segment(conn: redis.Redis, ns: str, seed: int) -> None:
    """A segment as pion-llm's stage-1 store leaves it: REGISTER, then both sides of every layer."""
    assert conn.execute_command("KV.PREFIX.REGISTER", ns, SHAPE.kv_dim, "fp16", "LAYERS", SHAPE.n_layers) == b"OK"
    rng = np.random.default_rng(seed)
    for side in ("pk", "pv"):
        for layer in range(SHAPE.n_layers):
            rows = rng.standard_normal((TOKENS, SHAPE.kv_dim)).astype(np.float16)
            assert conn.execute_command("V.STOREBATCH", f"{ns}_{side}", layer, 0, rows.tobytes(),
                                        "DTYPE", "f16") == TOKENS


def chain() -> list[ChainLink]:
    return [ChainLink(Namespace("s2w|seg0"), None, TOKENS, 0),
            ChainLink(Namespace("s2w|seg1"), Namespace("s2w|seg0"), TOKENS, TOKENS)]


def attend_chain(conn: redis.Redis) -> tuple[list[list[list[list[float]]]], Stage2Restore]:
    restore = Stage2Restore(lambda: conn, SHAPE)
    remote = restore.restore(chain())
    assert remote is not None and (remote.n_links, remote.n_tokens) == (2, 2 * TOKENS)
    gen = torch.Generator().manual_seed(5)
    query = torch.randn(1, 4, 2, SHAPE.head_dim, generator=gen)  # 4 query heads over 2 KV heads, 2 rows
    keys, values = (torch.randn(1, SHAPE.n_kv_heads, 2, SHAPE.head_dim, generator=gen) for _ in range(2))
    out = remote.lane.attend(1, query, keys, values, SHAPE.head_dim ** -0.5, None)
    return out.tolist(), restore


def test_a_chain_split_over_two_workers_attends_like_the_same_chain_on_one_server(
        servers: tuple[WorkerGroup, ServerProcess]) -> None:
    group, single = servers
    with group.worker(0) as w0, group.worker(1) as w1, single.client() as one:
        store_segment(w0, "s2w|seg0", seed=1)
        store_segment(w1, "s2w|seg1", seed=2)
        store_segment(one, "s2w|seg0", seed=1)
        store_segment(one, "s2w|seg1", seed=2)
        want, _ = attend_chain(one)
        got, restore = attend_chain(w1)  # seg0 lives on worker 0: found there after one redirect
        assert got == want
        assert np.isfinite(np.array(got)).all()
        assert restore.redirects == 1
        assert [w0.execute_command("ATTEND.PREFIX.LOOKUP", "s2w|seg0_attn", 1),
                w1.execute_command("ATTEND.PREFIX.LOOKUP", "s2w|seg1_attn", 1)] == [b"HIT", b"HIT"]
