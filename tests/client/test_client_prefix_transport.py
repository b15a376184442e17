"""The one prefix transport (pion.client.prefix_transport) against a real pion-server, and the
namespaces both of its users derive, which must not change for existing stored prefixes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from pion import PionClient, PionPromptCache
from pion.client.namespaces import NAMESPACE_VERSION, chain_child, chain_root, model_identity
from pion.client.prefix_transport import LayerFormats, PrefixTransport, stacked_rows
from pion.client.runtimes.transformers_kv import KvShape
from pion.common.ids import Namespace
from pion.llm.segments import ChainLink, ModelShape, SegmentKV, child_namespace, root_namespace
from pion.llm.stores import PionSegmentStore
from support.procs import ServerProcess, free_port

SHAPE = KvShape(n_layers=3, n_kv_heads=2, head_dim=32)


def _segment(n_tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    dims = (SHAPE.n_layers, SHAPE.n_kv_heads, n_tokens, SHAPE.head_dim)
    return torch.randn(dims, generator=gen), torch.randn(dims, generator=gen)


def _stacked(restored: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return restored.stacked("k").float(), restored.stacked("v").float()


# ---- namespaces: byte-identical to the derivations before the transport was shared ------------
# Values computed by the code on main before this change (pion.client.namespaces and
# pion.llm.segments as they were), for the embedded SmolLM2: a changed value would orphan every
# prefix already stored on a running pion-server.
@pytest.mark.slow
def test_prompt_cache_and_pion_llm_namespaces_are_unchanged_for_smollm2(smollm: tuple[Any, Any],
                                                                       caplog: Any) -> None:
    model, tok = smollm
    with caplog.at_level("WARNING"):
        fp16 = PionPromptCache(model, port=free_port(), tokenizer=tok)
        int8_bp2 = PionPromptCache(model, vquant="int8", boundary_protect=2, port=free_port(), tokenizer=tok)
        no_tokenizer = PionPromptCache(model, port=free_port())
    assert fp16.namespace_for([1, 2, 3]) == "7a84e76b864852ad5fce187d5575422d"
    assert int8_bp2.namespace_for([1, 2, 3], "adapter=x") == "e2b82faf39f38e11dee4809835a0a571"
    assert no_tokenizer.namespace_for(list(range(100))) == "389b383967fe94d1a5bee993dfcd3bdb"
    root = root_namespace(ModelShape.of(model), "fp16")
    assert (root, child_namespace(root, [1, 2, 3])) == ("ddfc30a1d83fc4947f2c065e1ff89741",
                                                       "a6848505fe30e35d1028ff3dcd872e23")
    assert root_namespace(ModelShape.of(model), "int8") == "fc09257005b3bd9379afc8d5a4776652"
    assert ModelShape.of(model).model_id == model_identity(model) == model.pion_model_id


def test_the_chain_derivation_is_the_documented_sha256() -> None:
    import hashlib
    import struct

    root = chain_root("m@1", "fp16", 30, 192)
    assert NAMESPACE_VERSION == 1
    assert root == hashlib.sha256(b"pion-llm|v1|m@1|fp16|L30|D192").hexdigest()[:32]
    assert chain_child(root, [7, 8]) == hashlib.sha256(root.encode() + b"|" + struct.pack("<2I", 7, 8)).hexdigest()[:32]


# ---- store / restore through a real server ------------------------------------------------------
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8", "turbo4"])
def test_a_stored_prefix_restores_to_what_the_server_decodes(fmt: str, shared_pion_server: ServerProcess) -> None:
    keys, values = _segment(5, seed=1)
    with PionClient(port=shared_pion_server.port) as client:
        raw = PrefixTransport(client, SHAPE, LayerFormats.uniform(fmt, SHAPE.n_layers))
        outcome = raw.store(Namespace(f"t-{fmt}"), stacked_rows(keys, values))
        assert outcome == ([], 2 * 3 * 5 * 64 * (4 if fmt == "fp32" else 2), False)
        assert client.kv_prefix_lookup(f"t-{fmt}") is True
        k_raw, v_raw = _stacked(raw.restore(f"t-{fmt}", 5))
        server_side = PrefixTransport(client, SHAPE, LayerFormats.uniform(fmt, SHAPE.n_layers), restore_dtype="f16")
        k_f16, v_f16 = _stacked(server_side.restore(f"t-{fmt}", 5))
    assert (raw.k_wire, server_side.k_wire) == ("raw", "raw" if fmt in ("fp16", "fp32") else "f16")
    # Decoded here (fp32) or on the server (then sent as fp16): the same values up to that fp16 rounding.
    assert torch.equal(k_raw.half(), k_f16.half()) is True
    assert torch.equal(v_raw.half(), v_f16.half()) is True
    if fmt == "fp32":
        assert (torch.equal(k_raw, keys), torch.equal(v_raw, values)) == (True, True)
    if fmt == "fp16":
        assert (torch.equal(k_raw, keys.half().float()), torch.equal(v_raw, values.half().float())) == (True, True)


def test_a_boundary_protected_prefix_registers_a_schema_and_restores_each_layer_in_its_format(
        shared_pion_server: ServerProcess) -> None:
    keys, values = _segment(4, seed=2)
    formats = LayerFormats.boundary_protected("int8", SHAPE.n_layers, 1)
    assert (formats.k, formats.v, formats.schema) == (("fp16",) * 3, ("fp16", "int8", "fp16"), True)
    with PionClient(port=shared_pion_server.port) as client:
        transport = PrefixTransport(client, SHAPE, formats)
        assert transport.store("t-bp", stacked_rows(keys, values))[0] == []
        k, v = _stacked(transport.restore("t-bp", 4))
    assert torch.equal(k, keys.half().float()) is True
    assert torch.equal(v[[0, 2]], values[[0, 2]].half().float()) is True
    assert float((v[1] - values[1]).abs().max()) < 0.05


def test_a_chain_restores_up_to_its_first_missing_or_malformed_segment(shared_pion_server: ServerProcess) -> None:
    with PionClient(port=shared_pion_server.port) as client:
        transport = PrefixTransport(client, SHAPE, LayerFormats.uniform("fp16", SHAPE.n_layers))
        for name, n in (("c-0", 3), ("c-1", 2), ("c-3", 4)):
            assert transport.store(name, stacked_rows(*_segment(n, seed=n)))[0] == []
        chain = transport.fetch_chain([(Namespace("c-0"), 3), (Namespace("c-1"), 2), (Namespace("c-2"), 1),
                                       (Namespace("c-3"), 4)])
        assert [r.n_tokens for r in chain] == [3, 2]
        # c-1 holds 2 tokens; asking for 3 is a malformed reply (-ERR), which ends the chain too.
        assert [r.n_tokens for r in transport.fetch_chain([(Namespace("c-0"), 3), (Namespace("c-1"), 3)])] == [3]
        assert transport.fetch_chain([]) == []


def test_transport_refuses_formats_that_do_not_cover_the_model() -> None:
    with pytest.raises(ValueError) as info:
        PrefixTransport(PionClient(port=free_port()), SHAPE, LayerFormats.uniform("fp16", 2))
    assert str(info.value) == "formats cover 2/2 layers, model has 3"


# ---- pion-llm's segment store uses the same transport -------------------------------------------
def test_pion_llm_segments_in_a_quantized_format_travel_raw_and_decode_in_the_client(
        shared_pion_server: ServerProcess) -> None:
    shape = ModelShape(SHAPE.n_layers, SHAPE.n_kv_heads, SHAPE.head_dim, model_id="toy@1")
    store = PionSegmentStore(shape, "int8", port=shared_pion_server.port)
    root = root_namespace(shape, "int8")
    keys, values = _segment(6, seed=3)
    link = ChainLink(child_namespace(root, list(range(6))), None, 6, 0)
    assert store.store(link, SegmentKV(keys, values)) is True
    transport = store._transport()
    assert transport is not None
    assert (transport.k_wire, transport.v_wire) == ("raw", "raw")
    [segment] = store.fetch_chain([link])
    assert (segment.keys.shape, segment.keys.dtype) == (keys.shape, torch.float32)
    assert float((segment.keys - keys).abs().max()) < 0.05
    assert float((segment.values - values).abs().max()) < 0.05
    with PionClient(port=shared_pion_server.port) as client:
        f16 = PrefixTransport(client, shape, LayerFormats.uniform("int8", shape.n_layers), restore_dtype="f16")
        k_f16, _ = _stacked(f16.restore(link.namespace, 6))
    assert np.array_equal(segment.keys.half().numpy(), k_f16.half().numpy()) is True
