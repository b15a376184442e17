"""The MLX client path imports no torch: ``pip install 'pion[mlx]'`` works without it.

A subprocess makes torch unimportable (``sys.modules['torch'] = None``: any ``import torch``
raises), then runs ``pion.mlx.PionPromptCache`` misses and hits against a real pion-server with
tiny randomly initialised mlx-lm models: a Llama (fp16 and mlx4g32) and an LFM2 hybrid (states
through ``SSM.PREFIX.*``). About 15 s here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (the [mlx] extra)")

from support.procs import ServerProcess  # noqa: E402

SCRIPT = textwrap.dedent("""
    import json, sys
    sys.modules["torch"] = None  # `import torch` now raises ImportError
    import mlx.core as mx
    from mlx_lm.models import lfm2, llama
    from pion.mlx import PionPromptCache

    port = int(sys.argv[1])
    mx.random.seed(0)
    llama_model = llama.Model(llama.ModelArgs(
        model_type="llama", hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=2,
        rms_norm_eps=1e-5, vocab_size=128, num_key_value_heads=1, head_dim=32))
    lfm2_model = lfm2.Model(lfm2.ModelArgs(
        model_type="lfm2", vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=512, norm_eps=1e-5, conv_bias=False, conv_L_cache=3,
        block_dim=64, block_multiple_of=16, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=False,
        intermediate_size=128, layer_types=["conv", "full_attention", "conv"]))
    mx.eval(llama_model.parameters(), lfm2_model.parameters())
    prefix = [3, 1, 4, 1, 5, 9, 2, 6]
    out = {}
    for name, model, fmt in (("llama-fp16", llama_model, "fp16"), ("llama-mlx4g32", llama_model, "mlx4g32"),
                             ("lfm2-fp16", lfm2_model, "fp16")):
        with PionPromptCache(model, vquant=fmt, port=port) as pc:
            miss = pc.get_or_prefill(prefix)
            hit = pc.get_or_prefill(prefix)
            stats = pc.stats()
        out[name] = {"hits": stats["hits"], "misses": stats["misses"], "fallbacks": stats["fallbacks"],
                     "types": [type(c).__name__ for c in hit],
                     "same_types": [type(c).__name__ for c in miss] == [type(c).__name__ for c in hit]}
    out["torch_modules"] = sorted(m for m, mod in sys.modules.items()
                                  if (m == "torch" or m.startswith("torch.")) and mod is not None)
    print(json.dumps(out))
""")


def test_the_mlx_prompt_cache_stores_and_restores_with_torch_unimportable(
        shared_pion_server: ServerProcess) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(shared_pion_server.port)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["torch_modules"] == []
    for name in ("llama-fp16", "llama-mlx4g32", "lfm2-fp16"):
        assert (result[name]["hits"], result[name]["misses"], result[name]["fallbacks"]) == (1, 1, 0), name
        assert result[name]["same_types"] is True
    assert result["llama-fp16"]["types"] == ["KVCache", "KVCache"]
    assert result["llama-mlx4g32"]["types"] == ["QuantizedKVCache", "QuantizedKVCache"]
    assert result["lfm2-fp16"]["types"] == ["ArraysCache", "KVCache", "ArraysCache"]


def test_stage2_names_still_import_from_pion_mlx() -> None:
    from pion import mlx as pion_mlx
    from pion.client.runtimes import mlx_stage2

    assert pion_mlx.install_pion_attention_patch is mlx_stage2.install_pion_attention_patch
    assert pion_mlx.make_pion_prompt_cache is mlx_stage2.make_pion_prompt_cache
    with pytest.raises(AttributeError, match="module 'pion.mlx' has no attribute 'nothing_here'"):
        getattr(pion_mlx, "nothing_here")
