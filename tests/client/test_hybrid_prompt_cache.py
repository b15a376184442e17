"""Hybrid-aware PionPromptCache: tiny random Mamba2, Jamba, Qwen3-Next-style and LFM2 models,
stored by one process and restored by another through a real pion-server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from pion.client.hybrid_prefix import LayerKind, layer_kinds, suffix_logits
from pion.client.prompt_cache import PionPromptCache
from pion.client.runtimes.transformers_runtime import prefill
from pion.client.state_blob import StateBlobError, decode_arrays, encode_arrays
from support.hybrid_models import FAMILIES, save_tiny
from support.procs import ServerProcess

PREFIX = list(range(3, 40))
SUFFIX = [50, 51, 52, 53]
WRITER = Path(__file__).resolve().parents[1] / "support" / "hybrid_writer.py"
LAYOUTS = {"mamba2": "RR", "jamba": "RARA", "qwen3_next": "RARA", "lfm2": "RARA"}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-hybrids")
    return {family: save_tiny(family, root / family) for family in FAMILIES}


def load(path: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).eval()


def test_state_blob_round_trips_fp32_fp16_bf16_and_absent_arrays_exactly() -> None:
    arrays = [torch.randn(2, 3), torch.randn(4).half(), torch.randn(1, 2, 2).bfloat16(), None]
    back = decode_arrays(encode_arrays(arrays))
    assert back[3] is None
    for original, restored in zip(arrays[:3], back[:3], strict=True):
        assert restored is not None
        assert (restored.dtype, tuple(restored.shape)) == (original.dtype, tuple(original.shape))
        assert torch.equal(restored, original)


def test_state_blob_bytes_follow_the_reference_layout() -> None:
    blob = encode_arrays([torch.tensor([1.0, -2.0], dtype=torch.float16)])
    assert blob.hex() == "01000000" "01000000" "01000000" "02000000" "01000000" "003c00c0"


@pytest.mark.parametrize("blob, message", [
    (b"\x02\x00\x00\x00\x00\x00\x00\x00", "state blob version 2 is not 1"),
    (b"\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x07\x00\x00\x00",
     "unknown dtype code 7 in state blob"),
    (b"\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00",
     "state blob holds 2 bytes for an array needing 8"),
    (b"\x01\x00\x00", "state blob ends at byte 3 inside a header field"),
    (b"\x01\x00\x00\x00\x00\x00\x00\x00\xff", "1 stray bytes after the last array of the state blob"),
])
def test_a_damaged_state_blob_is_refused_with_the_reason(blob: bytes, message: str) -> None:
    with pytest.raises(StateBlobError) as exc:
        decode_arrays(blob)
    assert str(exc.value) == message


@pytest.mark.parametrize("family", FAMILIES)
def test_layers_are_classified_from_the_models_own_cache_layout(family: str, model_dirs: dict[str, Path]) -> None:
    kinds = layer_kinds(load(model_dirs[family]))
    assert "".join(k.value for k in kinds) == LAYOUTS[family]
    assert LayerKind.RECURRENT in kinds


@pytest.mark.parametrize("family", FAMILIES)
def test_a_prefix_stored_by_one_process_restores_bit_identical_state_in_another(
        family: str, model_dirs: dict[str, Path], pion_server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "writer.pt"
    subprocess.run([sys.executable, str(WRITER), str(model_dirs[family]), str(pion_server.port),
                    ",".join(map(str, PREFIX)), ",".join(map(str, SUFFIX)), str(out)], check=True, timeout=300)
    written = torch.load(out)
    assert (written["misses"], written["store_failures"]) == (1, 0)
    model = load(model_dirs[family])
    with PionPromptCache(model, vquant="fp32", port=pion_server.port) as pc:
        cache = pc.get_or_prefill(PREFIX)
        assert (pc.stats()["hits"], pc.stats()["fallbacks"]) == (1, 0)
        assert pc.hybrid is not None
        for i, arrays in written["states"].items():
            layer = cache.layers[i]
            restored = [t for s in range(layer.number_of_states)
                        for t in (layer.conv_states[s], layer.recurrent_states[s])]
            for before, after in zip(arrays, restored, strict=True):
                if before is None:
                    assert after is None
                else:
                    assert float((before - after).abs().max()) == 0.0
        logits = suffix_logits(model, cache, SUFFIX)
    assert float((logits - written["logits"]).abs().max()) <= 1e-5


def test_jamba_needs_the_one_token_suffix_path_after_a_restore(model_dirs: dict[str, Path],
                                                               pion_server: ServerProcess) -> None:
    model = load(model_dirs["jamba"])
    reference = suffix_logits(model, prefill(model, PREFIX), SUFFIX)  # one token at a time
    with PionPromptCache(model, vquant="fp32", port=pion_server.port) as pc:
        pc.get_or_prefill(PREFIX)
        restored = pc.get_or_prefill(PREFIX)
        assert pc.stats()["hits"] == 1
        assert float((suffix_logits(model, restored, SUFFIX) - reference).abs().max()) <= 1e-5


def test_the_namespace_names_the_layer_layout(model_dirs: dict[str, Path]) -> None:
    a = PionPromptCache(load(model_dirs["qwen3_next"]), port=1)  # nothing listens: local-only
    b = PionPromptCache(load(model_dirs["lfm2"]), port=1)
    assert a.hybrid is not None and a.hybrid.layout == "RARA"
    assert a.namespace_for(PREFIX) != b.namespace_for(PREFIX)


def test_store_refuses_a_cache_that_runs_past_the_prefix(model_dirs: dict[str, Path],
                                                         pion_server: ServerProcess) -> None:
    model = load(model_dirs["lfm2"])
    with PionPromptCache(model, vquant="fp32", port=pion_server.port) as pc:
        with pytest.raises(ValueError) as exc:
            pc.store(PREFIX, prefill(model, PREFIX + SUFFIX))
    assert str(exc.value) == ("a hybrid prefix is reusable only at the token boundary its state was saved at: "
                              f"the cache holds {len(PREFIX) + len(SUFFIX)} tokens, the prefix {len(PREFIX)}")


def test_a_pure_ssm_prefix_is_looked_up_and_dropped_like_a_kv_prefix(model_dirs: dict[str, Path],
                                                                       pion_server: ServerProcess) -> None:
    model = load(model_dirs["mamba2"])
    r = pion_server.client()
    with PionPromptCache(model, vquant="fp32", port=pion_server.port) as pc:
        ns = pc.namespace_for(PREFIX)
        assert pc.lookup(ns) is False
        pc.get_or_prefill(PREFIX)
        assert pc.lookup(ns) is True
        assert [blob is not None for blob in r.execute_command("SSM.PREFIX.MFETCH", ns, 0, 2)] == [True, True]
        assert r.execute_command("KV.PREFIX.DROP", ns) == 1
        assert r.execute_command("SSM.PREFIX.MFETCH", ns, 0, 2) == [None, None]
        assert pc.lookup(ns) is False


def test_a_missing_state_layer_falls_back_to_a_local_prefill(model_dirs: dict[str, Path],
                                                             pion_server: ServerProcess) -> None:
    model = load(model_dirs["qwen3_next"])
    with PionPromptCache(model, vquant="fp32", port=pion_server.port) as pc:
        ns = pc.namespace_for(PREFIX)
        pc.get_or_prefill(PREFIX)
        pion_server.client().execute_command("SSM.PREFIX.DROP", ns, 2)
        cache = pc.get_or_prefill(PREFIX)
        assert (pc.stats()["hits"], pc.stats()["fallbacks"], pc.stats()["misses"]) == (0, 1, 2)
        reference = suffix_logits(model, prefill(model, PREFIX), SUFFIX)
        assert float((suffix_logits(model, cache, SUFFIX) - reference).abs().max()) <= 1e-5


def test_an_unreachable_server_leaves_the_hybrid_cache_local_only(model_dirs: dict[str, Path]) -> None:
    model = load(model_dirs["mamba2"])
    pc = PionPromptCache(model, port=1)
    assert pc.local_only is True
    cache = pc.get_or_prefill(PREFIX)
    assert float((suffix_logits(model, cache, SUFFIX)
                  - suffix_logits(model, prefill(model, PREFIX), SUFFIX)).abs().max()) == 0.0


def test_pion_client_spells_the_ssm_prefix_commands(pion_server: ServerProcess) -> None:
    from pion.client.connection import PionClient

    with PionClient(port=pion_server.port) as client:
        assert client.ssm_prefix_store("ns", 1, b"\x00state") is True
        assert client.ssm_prefix_fetch("ns", 1) == b"\x00state"
        assert client.ssm_prefix_fetch("ns", 2) is None
        assert client.ssm_prefix_mfetch("ns", 0, 3) == [None, b"\x00state", None]
        pipe = client.pipeline()
        pipe.ssm_prefix_store("ns", 0, b"zero")
        pipe.ssm_prefix_drop("ns", 1)
        pipe.ssm_prefix_mfetch("ns", 0, 2)
        assert pipe.execute() == [True, True, [b"zero", None]]
        assert client.ssm_prefix_drop("ns") is True
        assert client.ssm_prefix_mfetch("ns", 0, 1) == [None]
        assert client.ssm_prefix_fetch("ns", 0) is None


@pytest.mark.parametrize("restore_dtype", ["auto", "f16"])
def test_a_quantized_attention_half_goes_through_the_shared_prefix_transport(
        restore_dtype: str, model_dirs: dict[str, Path], pion_server: ServerProcess) -> None:
    from pion.client.prefix_transport import PrefixTransport

    model = load(model_dirs["qwen3_next"])  # layout RARA: attention layers 1 and 3 are rows 0 and 1
    reference = prefill(model, PREFIX)
    with PionPromptCache(model, vquant="int8", port=pion_server.port, restore_dtype=restore_dtype) as pc:
        assert isinstance(pc._transport, PrefixTransport) and pc._transport.shape.n_layers == 2
        assert pc._transport.k_wire == ("raw" if restore_dtype == "auto" else "f16")
        ns = pc.namespace_for(PREFIX)
        pc.get_or_prefill(PREFIX)
        cache = pc.get_or_prefill(PREFIX)
        assert (pc.stats()["hits"], pc.stats()["fallbacks"]) == (1, 0)
        assert set(pc.stats()["last_restore_ms"]) == {"lookup", "fetch", "decode", "build"}
        info = pion_server.client().execute_command("V.INFO", f"{ns}_pk")
        assert b"int8" in info
    for i in (1, 3):
        for side in ("keys", "values"):
            want, got = getattr(reference.layers[i], side), getattr(cache.layers[i], side)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert float((got - want).abs().max()) <= 0.02 * float(want.abs().max())
    for i in (0, 2):  # recurrent layers: exact
        assert torch.equal(cache.layers[i].recurrent_states[0], reference.layers[i].recurrent_states[0])
