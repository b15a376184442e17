"""Expand ``semantic_eval_seeds.py`` into the L1 evaluation set (issue 18).

    python benchmarks/make_semantic_eval_set.py   # rewrites the two files below, deterministic

Writes
  benchmarks/data/semantic_eval_pairs.jsonl          {id, split, domain, intent, category, a, b}
  benchmarks/data/semantic_eval_conversations.jsonl  {id, split, domain, category, a, b} where a/b
                                                     are OpenAI ``messages`` lists
``a`` is the cached request, ``b`` the new one. Categories: ``paraphrase`` (should hit)
and the traps ``entity_swap``, ``negation``, ``numbers_dates``, ``scope_change``;
conversations: ``paraphrase`` (same follow-up after the same context in other words) and
``other_context`` (the same follow-up after a different context).

The split is by domain family (``SPLIT_OF_DOMAIN``): every phrasing, entity and
qualifier of a test domain is unseen while anything is tuned on train/dev.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from semantic_eval_seeds import DOMAINS, LATE_FAMILIES, SPLIT_OF_DOMAIN

PAIRS_OUT = ROOT / "benchmarks" / "data" / "semantic_eval_pairs.jsonl"
CONV_OUT = ROOT / "benchmarks" / "data" / "semantic_eval_conversations.jsonl"
ACKS = ["Sure, how can I help?", "Okay, got it.", "Thanks for letting me know.", "I see. What would you like to do?",
        "Understood."]


def fill(template: str, slots: dict[str, str]) -> str:
    return template.format(**slots)


def with_scope(text: str, qualifier: str) -> str:
    """Append a qualifier before the final punctuation: 'How do I X?' -> 'How do I X on Android?'."""
    end = text[-1] if text[-1] in "?.!" else ""
    return f"{text[: len(text) - len(end)]} {qualifier}{end or '?'}"


def slot_fills(rng: random.Random, dom: dict[str, Any], intent: dict[str, Any], k: int) -> list[dict[str, str]]:
    """``k`` distinct slot assignments for an intent."""
    out: list[dict[str, str]] = []
    ents = dom["entities"][intent["e"]]
    for e in rng.sample(ents, k):
        slots = {"e": e}
        if "n" in intent:
            slots["n"] = rng.choice(dom["numbers"][intent["n"]])
        if "d" in intent:
            slots["d"] = rng.choice(dom["dates"][intent["d"]])
        out.append(slots)
    return out


def intent_pairs(rng: random.Random, dom: dict[str, Any], intent: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(category, a, b) pairs for one intent."""
    phr: list[str] = intent["p"]
    pairs: list[tuple[str, str, str]] = []
    fills = slot_fills(rng, dom, intent, 2)
    for slots in fills:
        for i, j in itertools.combinations(range(len(phr)), 2):
            a, b = (i, j) if rng.random() < 0.5 else (j, i)
            pairs.append(("paraphrase", fill(phr[a], slots), fill(phr[b], slots)))
    for k, template in enumerate(intent.get("bare", ())):  # the name on one side only ("my account")
        slots = fills[k % 2]
        a, b = fill(phr[k % len(phr)], slots), fill(template, slots)
        pairs.append(("paraphrase", a, b) if k % 2 == 0 else ("paraphrase", b, a))
    ents = dom["entities"][intent["e"]]
    for k in range(3):  # the same or a paraphrased question about another entity
        slots = dict(fills[k % 2])
        other = rng.choice([e for e in ents if e != slots["e"]])
        i = rng.randrange(len(phr))
        j = i if k == 0 else rng.randrange(len(phr))
        pairs.append(("entity_swap", fill(phr[i], slots), fill(phr[j], slots | {"e": other})))
    slot = "n" if "n" in intent else ("d" if "d" in intent else None)
    if slot is not None:
        pool = dom["numbers"][intent["n"]] if slot == "n" else dom["dates"][intent["d"]]
        for k in range(4):
            slots = dict(fills[k % 2])
            other = rng.choice([v for v in pool if v != slots[slot]])
            i = rng.randrange(len(phr))
            j = i if k < 2 else rng.randrange(len(phr))
            pairs.append(("numbers_dates", fill(phr[i], slots), fill(phr[j], slots | {slot: other})))
    for k, slots in enumerate(fills):
        a, b = fill(phr[0], slots), fill(intent["neg"], slots)
        pairs.append(("negation", a, b) if k == 0 else ("negation", b, a))
    for n_opp, template in enumerate(intent.get("opp", ())):  # the opposite-action families only
        for k, slots in enumerate(fills):
            a, b = fill(phr[(n_opp + k + 1) % len(phr)], slots), fill(template, slots)
            pairs.append(("negation", a, b) if (n_opp + k) % 2 == 0 else ("negation", b, a))
    for slots in fills:
        i = rng.randrange(len(phr))
        q = rng.choice(dom["scope"])
        a, b = fill(phr[i], slots), with_scope(fill(phr[i], slots), q)
        pairs.append(("scope_change", a, b) if rng.random() < 0.5 else ("scope_change", b, a))
    return pairs


def conversation(rng: random.Random, ctx: str, follow_up: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": ctx}, {"role": "assistant", "content": rng.choice(ACKS)},
            {"role": "user", "content": follow_up}]


def conversation_pairs(rng: random.Random, dom: dict[str, Any], dom_name: str = "") -> list[tuple[str, list, list]]:
    """(category, a messages, b messages) for one domain's conversation seeds."""
    out: list[tuple[str, list, list]] = []
    seeds = dom["conversations"]
    for s_idx, seed in enumerate(seeds):
        ents = dom["entities"][seed["e"]]
        for e in rng.sample(ents, 2):
            for group in seed["fu"]:
                for _ in range(2):  # the same context in other words, the same or paraphrased follow-up
                    i, j = rng.sample(range(len(seed["ctx"])), 2)
                    fa, fb = rng.choice(group), rng.choice(group)
                    out.append(("paraphrase", conversation(rng, fill(seed["ctx"][i], {"e": e}), fa),
                                conversation(rng, fill(seed["ctx"][j], {"e": e}), fb)))
                fu = rng.choice(group)
                other = rng.choice([x for x in ents if x != e])
                i, j = rng.randrange(len(seed["ctx"])), rng.randrange(len(seed["ctx"]))
                out.append(("other_context", conversation(rng, fill(seed["ctx"][i], {"e": e}), fu),
                            conversation(rng, fill(seed["ctx"][j], {"e": other}), fu)))
                # the same follow-up after a context about another kind of thing
                # (families added later are left out of earlier families' pool, so that
                # appending a family keeps every earlier row byte-identical)
                others = [x for k, x in enumerate(seeds) if k != s_idx] or [
                    x for name, d in DOMAINS.items() for x in d["conversations"]
                    if x is not seed and (name not in LATE_FAMILIES or dom_name in LATE_FAMILIES)]
                alt = rng.choice(others)
                alt_dom = next(d for d in DOMAINS.values() if alt in d["conversations"])
                alt_ctx = fill(rng.choice(alt["ctx"]), {"e": rng.choice(alt_dom["entities"][alt["e"]])})
                out.append(("other_context", conversation(rng, fill(seed["ctx"][i], {"e": e}), fu),
                            conversation(rng, alt_ctx, fu)))
    return out


def main() -> None:
    rng = random.Random(18)
    pair_rows: list[dict[str, Any]] = []
    conv_rows: list[dict[str, Any]] = []
    for domain, dom in DOMAINS.items():
        split = SPLIT_OF_DOMAIN[domain]
        for n_intent, intent in enumerate(dom["intents"]):
            for category, a, b in intent_pairs(rng, dom, intent):
                pair_rows.append({"id": len(pair_rows) + 1, "split": split, "domain": domain,
                                  "intent": f"{domain}/{n_intent}", "category": category, "a": a, "b": b})
        for category, ma, mb in conversation_pairs(rng, dom, domain):
            conv_rows.append({"id": len(conv_rows) + 1, "split": split, "domain": domain,
                              "category": category, "a": ma, "b": mb})
    PAIRS_OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pair_rows))
    CONV_OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in conv_rows))
    for name, rows in (("pairs", pair_rows), ("conversations", conv_rows)):
        counts: dict[tuple[str, str], int] = {}
        for r in rows:
            counts[(r["split"], r["category"])] = counts.get((r["split"], r["category"]), 0) + 1
        print(f"{name}: {len(rows)}")
        for key in sorted(counts):
            print(f"  {key[0]:5} {key[1]:14} {counts[key]}")


if __name__ == "__main__":
    main()
