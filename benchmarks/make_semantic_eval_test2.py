"""Write the L1 evaluation set's held-out split ``test2`` (issue 18) from its hand-written seeds.

Kept as the command the docs name; the work is done by ``make_semantic_eval_heldout.py``, which
writes every held-out split (``test2``, ``test3``) the same way.

    python benchmarks/make_semantic_eval_test2.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_semantic_eval_heldout as heldout  # noqa: E402

SPLIT = "test2"
PAIRS_OUT, CONV_OUT = heldout.paths(SPLIT)


def pair_rows() -> list[dict[str, object]]:
    return heldout.pair_rows(SPLIT)


def conversation_rows() -> list[dict[str, object]]:
    return heldout.conversation_rows(SPLIT)


def main() -> None:
    heldout.write(SPLIT)


if __name__ == "__main__":
    main()
