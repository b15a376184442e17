"""Which splits of the L1 evaluation set a tool may read (issue 18), in one place.

Spent splits were scored and then opened for training and tuning (sixth round); fresh
held-out splits are scored once, by the lead, and no trainer or tuning view may open them.
A next round moves a split from ``FRESH_SPLITS`` to ``SPENT_SPLITS`` here, not in every tool.
No model or data is imported: tools check their arguments before any file is read.
"""

from __future__ import annotations

from collections.abc import Sequence

SPENT_SPLITS = ("train", "dev", "test", "test2", "test3")
FRESH_SPLITS = ("test4", "test5")


def refuse_unspent(splits: Sequence[str]) -> None:
    """Exit (SystemExit) naming every split that is fresh or unknown, before a file is opened."""
    bad = [s for s in splits if s in FRESH_SPLITS or s not in SPENT_SPLITS]
    if bad:
        raise SystemExit(f"refusing splits {bad}: test4/test5 are held out for the lead; "
                         f"this tool reads only {list(SPENT_SPLITS)}")
