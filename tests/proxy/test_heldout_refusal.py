"""The tuning paths refuse the fresh held-out splits (issue 18, sixth round).

Why: ``test4`` and ``test5`` are scored once, by the lead, after the verifier work is
merged; a tuning tool that read them even once would turn them into development data.
These tests call the tools' own checks and entry points; no split file is opened.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import hard_check_eval  # noqa: E402
import semantic_cache_eval  # noqa: E402


@pytest.mark.parametrize("split", ["test4", "test5"])
def test_the_hard_check_tool_refuses_a_fresh_split_before_reading_anything(
        split: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["hard_check_eval.py", "--splits", "train", split])
    with pytest.raises(SystemExit) as exc:
        hard_check_eval.main()
    assert str(exc.value) == (f"refusing splits ['{split}']: test4/test5 are held out for the lead; "
                              "this tool reads only ['train', 'dev', 'test', 'test2', 'test3']")


def test_the_hard_check_tool_shows_only_spent_splits() -> None:
    with pytest.raises(SystemExit) as exc:
        hard_check_eval.check_splits(["test3"], show="test3")
    assert str(exc.value) == ("refusing --show test3: only the spent splits "
                              "['train', 'dev', 'test', 'test2'] may be shown")
    assert hard_check_eval.check_splits(["train", "dev", "test", "test2"], show="dev") is None


@pytest.mark.parametrize("flag", [["--fit"], ["--show-failures", "dev"]])
def test_the_scorers_tuning_views_refuse_a_fresh_split(flag: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["semantic_cache_eval.py", *flag, "--splits", "dev", "test5"])
    with pytest.raises(SystemExit) as exc:
        semantic_cache_eval.main()
    assert str(exc.value) == ("refusing to tune on or show ['test5']: the fresh held-out splits are scored "
                              "once, by the lead, without --fit or --show-failures")


def test_the_scorer_still_scores_a_fresh_split_when_not_tuning() -> None:
    assert semantic_cache_eval.refuse_heldout_tuning(["test4", "test5"], tuning=False) is None
