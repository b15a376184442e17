"""One intent of a held-out split's seeds (``semantic_eval_<split>_seeds.py``): a cached
question, the questions that share its answer and the near misses that do not. One
definition for every split, so ``make_semantic_eval_heldout.py`` reads them all alike."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Intent:
    """A cached question ``a``, its paraphrases ``p`` and one list per trap kind."""

    a: str
    p: list[str]  # paraphrases: same meaning, same answer
    entity_swap: list[str] = field(default_factory=list)  # another product/person/place/version
    negation: list[str] = field(default_factory=list)  # negated, or the opposite action
    numbers_dates: list[str] = field(default_factory=list)  # another quantity/amount/date/time
    scope_change: list[str] = field(default_factory=list)  # a qualifier that changes the answer
