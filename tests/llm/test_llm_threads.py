"""pion-llm's torch thread count: half the usable CPUs unless told otherwise (pion.llm.main)."""

from __future__ import annotations

import os

from pion.llm.config import load_config
from pion.llm.main import torch_threads


def test_the_default_is_half_the_usable_cpus_and_at_least_one() -> None:
    usable = len(os.sched_getaffinity(0))
    assert load_config([]).threads is None
    assert torch_threads(None) == max(1, usable // 2)


def test_zero_keeps_torchs_own_default_and_a_number_is_used_as_given() -> None:
    assert torch_threads(load_config(["--threads", "0"]).threads) is None
    assert torch_threads(load_config(["--threads", "3"]).threads) == 3
