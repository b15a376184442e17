"""Write the L1 evaluation set's held-out split ``test2`` (issue 18) from its hand-written seeds.

The questions live in ``benchmarks/semantic_eval_test2_seeds.py``; this script only numbers them
and writes the two JSONL files in the same schema as the first set (see
``benchmarks/make_semantic_eval_set.py``), so a scorer reads either split the same way. Nothing is
generated from templates: every row is one hand-written question. Deterministic: re-running it
rewrites byte-identical files.

    python benchmarks/make_semantic_eval_test2.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from semantic_eval_test2_seeds import CONVERSATIONS, INTENTS, Intent  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
PAIRS_OUT = DATA / "semantic_eval_test2_pairs.jsonl"
CONV_OUT = DATA / "semantic_eval_test2_conversations.jsonl"
SPLIT = "test2"
TRAPS = ("entity_swap", "negation", "numbers_dates", "scope_change")


def intent_pairs(intent: Intent) -> list[tuple[str, str, str]]:
    """(category, cached, new) for one intent.

    The third paraphrase is the cached side and ``a`` the new one, so the set does not always cache
    the tidiest wording of a question."""
    pairs = []
    for k, para in enumerate(intent.p):
        pairs.append(("paraphrase", para, intent.a) if k == 2 else ("paraphrase", intent.a, para))
    for kind in TRAPS:
        pairs.extend((kind, intent.a, trap) for trap in getattr(intent, kind))
    return pairs


def pair_rows() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for domain, intents in INTENTS.items():
        for n, intent in enumerate(intents):
            for category, a, b in intent_pairs(intent):
                rows.append({"id": len(rows) + 1, "split": SPLIT, "domain": domain,
                             "intent": f"{domain}/{n}", "category": category, "a": a, "b": b})
    return rows


def messages(turns: list[str]) -> list[dict[str, str]]:
    """OpenAI chat messages from alternating user/assistant turns that start with the user."""
    return [{"role": "user" if k % 2 == 0 else "assistant", "content": t} for k, t in enumerate(turns)]


def conversation_rows() -> list[dict[str, object]]:
    return [{"id": k + 1, "split": SPLIT, "domain": domain, "category": category,
             "a": messages(a), "b": messages(b)}
            for k, (domain, category, a, b) in enumerate(CONVERSATIONS)]


def main() -> None:
    pairs, convs = pair_rows(), conversation_rows()
    PAIRS_OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pairs))
    CONV_OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in convs))
    print(f"{len(pairs)} pairs -> {PAIRS_OUT.name}, {len(convs)} conversations -> {CONV_OUT.name}")


if __name__ == "__main__":
    main()
