"""HybridRetrievalCache with an mlx-lm model (SmolLM2, real pion-server): the MLX version is chosen
by the model, keeps the transformers version's keys, and moves chunks with exact RoPE re-rotation.

Skipped where mlx-lm does not import; opt-in on Linux (``make test-mlx``), slow.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (the [mlx] extra)")

from pion import HybridRetrievalCache  # noqa: E402
from pion.client.mlx_retrieval_cache import MlxHybridRetrievalCache  # noqa: E402
from pion.client.runtimes.mlx_runtime import encode_prompt, first_token, prefill  # noqa: E402
from support.procs import ServerProcess  # noqa: E402

CHUNK_A = "The Eiffel Tower is 330 metres tall and stands in Paris."
CHUNK_B = "Mount Fuji is the highest mountain in Japan, at 3776 metres."
QUESTION = "\nQ: How tall is the Eiffel Tower?\nA:"


def test_an_mlx_model_gets_the_mlx_version_with_the_transformers_keys(
        smollm: tuple[Any, Any], smollm_mlx: tuple[Any, Any]) -> None:
    with HybridRetrievalCache(smollm_mlx[0]) as mine, HybridRetrievalCache(smollm[0]) as theirs:
        assert type(mine) is MlxHybridRetrievalCache
        assert type(theirs) is HybridRetrievalCache
        assert mine.namespace_for("doc-1") == theirs.namespace_for("doc-1")


def test_a_single_chunk_then_the_question_gives_the_full_prefills_first_token(smollm_mlx: tuple[Any, Any]) -> None:
    model, tok = smollm_mlx
    chunk, question = encode_prompt(tok, CHUNK_A), encode_prompt(tok, QUESTION)
    with HybridRetrievalCache(model, backend="inproc") as hr:
        hr.ingest("eiffel", chunk)
        cache, suffix = hr.prepare("eiffel", question)
        assert [c.offset for c in cache[:2]] == [len(chunk)] * 2
        assert first_token(model, suffix, cache) == first_token(model, chunk + question, None)


def test_a_second_chunk_moved_by_rope_holds_the_full_prefills_first_layer_keys(
        smollm_mlx: tuple[Any, Any], shared_pion_server: ServerProcess) -> None:
    """Layer-0 keys depend on a token and its position only, so a chunk prefilled at 0 and rotated
    to its place must equal the full prefill's keys there (fp32 storage: up to float rounding)."""
    model, tok = smollm_mlx
    a, b, question = encode_prompt(tok, CHUNK_A), encode_prompt(tok, CHUNK_B), encode_prompt(tok, QUESTION)
    with HybridRetrievalCache(model, backend="pion", vquant="fp32", port=shared_pion_server.port) as writer:
        writer.ingest("eiffel", a)
        writer.ingest("fuji", b)
    with HybridRetrievalCache(model, backend="pion", vquant="fp32", port=shared_pion_server.port) as reader:
        cache, _ = reader.prepare_multi(["eiffel", "fuji"], question)
        assert reader.composed_ids(["eiffel", "fuji"]) == a + b
    full = prefill(model, a + b)
    moved = np.array(cache[0].keys[:, :, len(a):len(a) + len(b)])
    expected = np.array(full[0].keys[:, :, len(a):len(a) + len(b)])
    np.testing.assert_allclose(moved, expected, rtol=0, atol=2e-4)


def test_unknown_chunks_are_refused(smollm_mlx: tuple[Any, Any]) -> None:
    model, tok = smollm_mlx
    with HybridRetrievalCache(model) as hr, pytest.raises(KeyError, match="never-ingested"):
        hr.prepare("never-ingested", [1, 2])
