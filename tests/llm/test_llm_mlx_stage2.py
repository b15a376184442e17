"""pion-llm ``--stage2`` on ``--runtime mlx``: restored segments are attended inside pion-server
through the mlx-lm attention patch, with the same greedy tokens as a cold prefill and as the
stage-1 restore.

The engine runs in process with a tiny randomly initialised mlx-lm Llama (SmolLM2's tokenizer
and vocabulary, 2 layers of width 64) and a real pion-server, so it is quick (~20 s here); the
served SmolLM2 path is ``tests/llm/test_llm_mlx.py`` (``make test-mlx``).
"""

from __future__ import annotations

from typing import Any

import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError, reason="mlx is not importable here")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (the [mlx] extra)")

from mlx_lm.models import llama  # noqa: E402

from pion.common.errors import ConfigError  # noqa: E402
from pion.llm.config import load_config  # noqa: E402
from pion.llm.engine import Engine  # noqa: E402
from pion.llm.mlx_ops import MLX_OPS  # noqa: E402
from pion.llm.stage2 import Stage2Restore  # noqa: E402
from pion.llm.stores import PionSegmentStore  # noqa: E402
from support.llm_engine import check_stage2_turns  # noqa: E402
from support.procs import ServerProcess  # noqa: E402


@pytest.fixture(scope="module")
def tiny_mlx() -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    from pion.client.runtimes.model_files import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m").path, local_files_only=True)
    mx.random.seed(11)
    model = llama.Model(llama.ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=2,
                                        intermediate_size=128, num_attention_heads=4, rms_norm_eps=1e-5,
                                        vocab_size=len(tok), num_key_value_heads=2, head_dim=16))
    mx.eval(model.parameters())
    model.pion_model_id = "tiny-random-llama-stage2-test"
    return model, tok


def engine_for(model: Any, tok: Any, port: int, stage2: bool) -> Engine:
    store = PionSegmentStore(MLX_OPS.shape(model), "fp32", port=port)
    restore = Stage2Restore(store.redis_client, MLX_OPS.shape(model)) if stage2 else None
    return Engine(model, tok, "tiny", store, "fp32", None, stage2=restore, ops=MLX_OPS)


def test_mlx_stage2_turns_give_the_same_greedy_tokens_as_cold_and_stage1(
        tiny_mlx: tuple[Any, Any], shared_pion_server: ServerProcess) -> None:
    model, tok = tiny_mlx
    check_stage2_turns(lambda stage2: engine_for(model, tok, shared_pion_server.port, stage2),
                       Engine(model, tok, "tiny", None, ops=MLX_OPS))


def test_stage2_is_accepted_with_runtime_mlx_and_a_device_still_is_not() -> None:
    config = load_config(["--runtime", "mlx", "--stage2"])
    assert (config.runtime, config.stage2) == ("mlx", True)
    with pytest.raises(ConfigError, match="--runtime mlx: takes no --device"):
        load_config(["--runtime", "mlx", "--device", "cpu"])
