"""K and V in different formats (the KIVI pair) through PionPromptCache(layer_formats=...)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from client_prompts import QUESTIONS, SYSTEM_PROMPTS, system_turn, user_turn
from pion import PionPromptCache
from pion.client.prefix_transport import LayerFormats
from pion.client.runtimes.transformers_kv import layer_rows
from pion.client.runtimes.transformers_runtime import encode_prompt, forward_logits, prefill
from pion.codecs import get_codec
from support.procs import ServerProcess


def test_mixed_formats_put_k_and_v_in_their_own_formats_and_fp16_on_the_edge_layers() -> None:
    formats = LayerFormats.mixed("kivi4g64", "mlx4g32", 5, 1)
    assert formats.k == ("fp16", "kivi4g64", "kivi4g64", "kivi4g64", "fp16")
    assert formats.v == ("fp16", "mlx4g32", "mlx4g32", "mlx4g32", "fp16")
    assert formats.schema is True


def test_mixed_formats_with_one_format_everywhere_register_without_a_schema() -> None:
    assert LayerFormats.mixed("int8h64", "int8h64", 3) == LayerFormats(("int8h64",) * 3, ("int8h64",) * 3, False)
    with pytest.raises(ValueError, match="n_protected must be >= 0, got -1"):
        LayerFormats.mixed("int8", "int8", 3, -1)


def _prompt(tok: Any, i: int) -> tuple[list[int], list[int]]:
    return encode_prompt(tok, system_turn(SYSTEM_PROMPTS[i])), encode_prompt(tok, user_turn(QUESTIONS[i]))


def test_the_kivi_pair_restores_exactly_the_decoded_rows_and_keeps_the_next_token(
        smollm: tuple[Any, Any], shared_pion_server: ServerProcess) -> None:
    model, tok = smollm
    n_layers = model.config.num_hidden_layers
    formats = LayerFormats.mixed("kivi4g64", "int8h64", n_layers)
    prefix, suffix = _prompt(tok, 1)
    local = prefill(model, prefix)
    with PionPromptCache(model, port=shared_pion_server.port, layer_formats=formats) as pc:
        assert pc.format_descriptor == f"k={','.join(formats.k)}/v={','.join(formats.v)}"
        ns = pc.namespace_for(prefix)
        pc.get_or_prefill(prefix, namespace=ns)
        warm = pc.get_or_prefill(prefix, namespace=ns)
        assert (pc.stats()["misses"], pc.stats()["hits"]) == (1, 1)
    with shared_pion_server.client() as conn:
        info = conn.execute_command("V.INFO", f"{ns}_pk")
    fields = dict(zip(info[::2], info[1::2], strict=True))
    assert (fields[b"format"], fields[b"schema"]) == (b"schema", [b"kivi4g64"] * n_layers)
    n = len(prefix)
    for layer in (0, 17):
        for side, fmt in (("k", "kivi4g64"), ("v", "int8h64")):
            rows = layer_rows(local, layer, side, n, torch.float16).astype(np.float32)
            expected = get_codec(fmt).decode(get_codec(fmt).encode(rows), rows.shape[1])
            got = layer_rows(warm, layer, side, n, torch.float32)
            assert got.tolist() == expected.tolist()
    reference = torch.log_softmax(forward_logits(model, suffix, prefill(model, prefix))[0], dim=-1)
    restored = torch.log_softmax(forward_logits(model, suffix, warm)[0], dim=-1)
    assert int(torch.argmax(restored)) == int(torch.argmax(reference))


def test_mixed_formats_can_put_other_formats_than_fp16_on_the_edge_layers() -> None:
    formats = LayerFormats.mixed("kivi4g64", "mlx4g32", 4, 1, "kivi8g128", "int8h64")
    assert formats.k == ("kivi8g128", "kivi4g64", "kivi4g64", "kivi8g128")
    assert formats.v == ("int8h64", "mlx4g32", "mlx4g32", "int8h64")
