"""pion-llm ``--stage2`` with the real SmolLM2 and a real pion-server: a multi-turn conversation
whose restored segments are attended inside pion-server gives the same greedy text as a cold
prefill and as the stage-1 restore; a demoted segment is rehydrated; the flag is validated."""

from __future__ import annotations

from typing import Any

import pytest

from pion.common.errors import ConfigError
from pion.llm.config import load_config
from pion.llm.engine import Engine
from pion.llm.segments import ModelShape
from pion.llm.stage2 import Stage2Restore
from pion.llm.stores import PionSegmentStore
from support.llm_engine import SYSTEM, check_stage2_turns, model_and_tokenizer, run  # the fixture too
from support.llm_procs import MODEL
from support.procs import ServerProcess

pytestmark = pytest.mark.slow


def engine_for(model: Any, tok: Any, port: int, stage2: bool, vquant: str = "fp32") -> Engine:
    store = PionSegmentStore(ModelShape.of(model), vquant, port=port)
    restore = Stage2Restore(store.redis_client, ModelShape.of(model)) if stage2 else None
    return Engine(model, tok, MODEL, store, vquant, None, stage2=restore)


def test_stage2_turns_give_the_same_greedy_text_as_cold_and_stage1(model_and_tokenizer: tuple[Any, Any],
                                                                    pion_server: ServerProcess) -> None:
    model, tok = model_and_tokenizer
    check_stage2_turns(lambda stage2: engine_for(model, tok, pion_server.port, stage2), Engine(model, tok, MODEL, None))


def test_a_demoted_segment_is_rehydrated_from_the_v_store(model_and_tokenizer: tuple[Any, Any],
                                                          pion_server: ServerProcess) -> None:
    model, tok = model_and_tokenizer
    cold = Engine(model, tok, MODEL, None)
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 5+5?"}]
    first = engine_for(model, tok, pion_server.port, stage2=True)
    answer, _ = run(first, turn1)
    turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "And 6+6?"}]
    run(first, turn2)  # the ATTEND side of segment 0 is now warm
    with pion_server.client() as r:
        filler = bytes(16)
        for i in range(256):
            r.execute_command("ATTEND.PREFIX.STORE", f"filler{i}", 0, 1, 1, 4, filler, filler)
        assert int(r.execute_command("KV.PREFIX.INFO").decode().split("sdpa_cold:")[1].split("\r")[0]) >= 30
    text, cached = run(engine_for(model, tok, pion_server.port, stage2=True), turn2)
    assert cached > 0
    assert text == run(cold, turn2)[0]


def test_stage2_flag_needs_pion_server() -> None:
    assert load_config(["--stage2"]).stage2 is True
    with pytest.raises(ConfigError, match="needs pion-server"):
        load_config(["--stage2", "--no-pion"])
