"""The cross-encoder's trainer and its author cross-validation refuse the fresh held-out
splits (test4, test5) before any file is read: the lead scores them once, after tuning
(issue 18, sixth round). The spent splits (train, dev, test, test2, test3) are allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from train_l1_cross_encoder import check_splits, load_spent, parse_rule  # noqa: E402


def test_the_spent_splits_are_accepted_in_the_order_given() -> None:
    assert check_splits(["test3", "train", "dev", "test", "test2"]) == ["test3", "train", "dev", "test", "test2"]


@pytest.mark.parametrize("split", ["test4", "test5"])
def test_a_fresh_held_out_split_is_refused_by_name(split: str) -> None:
    with pytest.raises(ValueError) as info:
        check_splits(["train", split])
    assert str(info.value) == (f"refusing split(s) {split}: fresh held-out data, scored once by the lead "
                               "and never read by a trainer or tuning path")


def test_an_unknown_split_is_refused_with_the_spent_ones_listed() -> None:
    with pytest.raises(ValueError) as info:
        check_splits(["train", "test9"])
    assert str(info.value) == "unknown split(s) test9: the spent splits are train, dev, test, test2, test3"


def test_loading_refuses_test4_before_reading_any_file() -> None:
    with pytest.raises(ValueError) as info:
        load_spent(["test2", "test4"])
    assert str(info.value).startswith("refusing split(s) test4:")


def test_loading_a_spent_later_split_gives_only_its_items() -> None:
    items = load_spent(["test2"])
    assert ({it.split for it in items}, len(items) > 0) == ({"test2"}, True)


def test_a_rule_from_the_cross_validation_parses_with_and_without_the_learned_stage() -> None:
    stacked, alone = parse_rule("0.65:0.178:0.5"), parse_rule("0.7:none:0.25")
    assert (stacked.floor, stacked.learned_threshold, stacked.threshold) == (0.65, 0.178, 0.5)
    assert (alone.floor, alone.learned_threshold, alone.threshold) == (0.7, None, 0.25)


@pytest.mark.parametrize("script,args", [
    ("train_l1_cross_encoder.py", ["--train-splits", "train", "test5", "--dry-run"]),
    ("train_l1_cross_encoder.py", ["--eval-splits", "test4", "--dry-run"]),
])
def test_the_trainer_command_line_exits_with_the_refusal(script: str, args: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                          text=True, env=env, timeout=120)
    assert (done.returncode, "refusing split(s) test" in done.stderr) == (2, True)


def test_the_author_folds_never_name_a_fresh_split() -> None:
    from l1_author_cv import FOLDS

    named = {s for train, held in FOLDS.values() for s in (*train, *held)}
    assert (named & {"test4", "test5"}, sorted(named)) == (set(), ["dev", "test", "test2", "test3", "train"])


def test_relabel_rewrites_only_the_rule_and_keeps_every_tensor(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from pion.proxy.cross_encoder import CROSS_WEIGHTS, read_meta
    from train_l1_cross_encoder import relabel

    copy = tmp_path / "cross.safetensors"
    copy.write_bytes(CROSS_WEIGHTS.read_bytes())
    before = read_meta(copy)
    after = relabel(copy, parse_rule("0.6:none:0.25"))
    assert (after.floor, after.learned_threshold, after.threshold) == (0.6, None, 0.25)
    assert read_meta(copy) == after
    assert (after.layers, after.trained) == (before.layers, before.trained)
    assert after.trained_on.startswith(before.trained_on.split("; rule re-chosen")[0])
    old, new = load_file(str(CROSS_WEIGHTS)), load_file(str(copy))
    assert sorted(old) == sorted(new)
    assert [name for name in old if not old[name].equal(new[name])] == []
