"""Snapshots cut a kivi layer (rows encoded in token groups) into chunks of whole groups.

A snapshot writes a layer in V.STOREBATCH chunks of at most SNAPSHOT_CHUNK_BYTES; replay refuses a
chunk that splits a token group, so the chunk size is rounded down to whole groups.
"""

from __future__ import annotations

import numpy as np
import pytest

from pion.codecs import get_codec
from pion.server.persist import binding
from pion.server.store.records import VStoreBatch
from pion.server.store.stores import Stores

KV_DIM = 64


@pytest.mark.parametrize("fmt,group", [("kivi4g32", 32), ("kivi8g128", 128), ("int8h64", 1)])
def test_snapshot_chunks_hold_whole_token_groups_and_replay_to_the_same_bytes(
        monkeypatch: pytest.MonkeyPatch, fmt: str, group: int) -> None:
    row = get_codec(fmt).row_bytes(KV_DIM)
    monkeypatch.setattr(binding, "SNAPSHOT_CHUNK_BYTES", 45 * row)  # 45 rows: not a whole group
    stores = Stores.make()
    data = np.random.default_rng(0).standard_normal((300, KV_DIM)).astype(np.float32)
    stores.vstore.create_session("s", KV_DIM, (fmt,), uniform=True)
    stores.vstore.store_rows("s", 0, 0, data.tobytes())
    batches = [r for r in binding.snapshot_records(stores) if isinstance(r, VStoreBatch)]
    step = max(group, 45 // group * group)
    assert [(b.start_id, b.n_rows) for b in batches] == [(a, min(step, 300 - a)) for a in range(0, 300, step)]
    rebuilt = Stores.make()
    rebuilt.vstore.create_session("s", KV_DIM, (fmt,), uniform=True)
    for batch in batches:
        batch.apply(rebuilt)
    assert bytes(rebuilt.vstore.fetch("s", 0, 0, 300, "raw")) == get_codec(fmt).encode(data)
