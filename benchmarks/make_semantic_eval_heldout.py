"""Write one held-out split of the L1 evaluation set (issue 18) from its hand-written seeds.

The questions of split ``<split>`` live in ``benchmarks/semantic_eval_<split>_seeds.py`` (``test2``
… ``test5``); this script only numbers them and writes
``benchmarks/data/semantic_eval_<split>_pairs.jsonl`` and ``..._conversations.jsonl`` in the same
schema as the first set (see ``benchmarks/make_semantic_eval_set.py``), so a scorer reads any split
the same way. Nothing is generated from templates: every row is one hand-written question.
Deterministic: re-running it rewrites byte-identical files.

    python benchmarks/make_semantic_eval_heldout.py --split test3
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parent
DATA = BENCH / "data"
SPLITS = ("test2", "test3", "test4", "test5")
TRAPS = ("entity_swap", "negation", "numbers_dates", "scope_change")


def seeds(split: str) -> ModuleType:
    """The seeds module of ``split``: it defines ``INTENTS`` (domain -> intents with ``a``, ``p``
    and one list per trap kind) and ``CONVERSATIONS`` ((domain, category, a turns, b turns))."""
    if split not in SPLITS:
        raise ValueError(f"unknown held-out split {split!r}; expected one of {SPLITS}")
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(f"semantic_eval_{split}_seeds")


def paths(split: str) -> tuple[Path, Path]:
    """(pairs file, conversations file) of ``split``."""
    return DATA / f"semantic_eval_{split}_pairs.jsonl", DATA / f"semantic_eval_{split}_conversations.jsonl"


def intent_pairs(intent: Any) -> list[tuple[str, str, str]]:
    """(category, cached, new) for one intent.

    The third paraphrase is the cached side and ``a`` the new one, so the set does not always cache
    the tidiest wording of a question."""
    pairs = []
    for k, para in enumerate(intent.p):
        pairs.append(("paraphrase", para, intent.a) if k == 2 else ("paraphrase", intent.a, para))
    for kind in TRAPS:
        pairs.extend((kind, intent.a, trap) for trap in getattr(intent, kind))
    return pairs


def pair_rows(split: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for domain, intents in seeds(split).INTENTS.items():
        for n, intent in enumerate(intents):
            for category, a, b in intent_pairs(intent):
                rows.append({"id": len(rows) + 1, "split": split, "domain": domain,
                             "intent": f"{domain}/{n}", "category": category, "a": a, "b": b})
    return rows


def messages(turns: list[str]) -> list[dict[str, str]]:
    """OpenAI chat messages from alternating user/assistant turns that start with the user."""
    return [{"role": "user" if k % 2 == 0 else "assistant", "content": t} for k, t in enumerate(turns)]


def conversation_rows(split: str) -> list[dict[str, object]]:
    return [{"id": k + 1, "split": split, "domain": domain, "category": category,
             "a": messages(a), "b": messages(b)}
            for k, (domain, category, a, b) in enumerate(seeds(split).CONVERSATIONS)]


def write(split: str) -> None:
    pairs, convs = pair_rows(split), conversation_rows(split)
    pairs_out, conv_out = paths(split)
    pairs_out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pairs))
    conv_out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in convs))
    print(f"{len(pairs)} pairs -> {pairs_out.name}, {len(convs)} conversations -> {conv_out.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=SPLITS, required=True)
    write(parser.parse_args().split)


if __name__ == "__main__":
    main()
