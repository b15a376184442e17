"""Write the two replays ``distill_eval.py`` measures --distill on (run once; output committed).

* ``benchmarks/data/distill_faq.jsonl``: a support-desk FAQ. 40 intents, each asked in 6
  phrasings (a paraphrase family), one trap per intent (same words but another object,
  number or a negation: a different question whose right answer differs), and 20
  two-part questions joining two intents. Order: seeded shuffle, so families interleave
  as in real traffic.
* ``benchmarks/data/distill_diverse.jsonl``: 300 questions that each have their own
  subject (MT-Bench first turns + MMLU question stems from ``/work/shared/data/router``),
  every one its own family: any answer served from a cache layer there is wrong.

Every row: ``{"id", "family", "question", "split", "kind"}``; ``family`` of a two-part
question is ``"a+b"``. The dev/test split is by intent (families never straddle it) and
was fixed here, before any threshold was tuned: tuning looks at dev only.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).parent / "data"
SEED = 1717
ROUTER_DATA = Path("/work/shared/data/router")

# (verb phrase, noun phrase, trap verb phrase): the trap differs in one deciding word.
INTENTS = [
    ("reset my password", "password reset", "reset my router"),
    ("cancel my subscription", "subscription cancellation", "renew my subscription"),
    ("change my shipping address", "shipping address change", "change my billing address"),
    ("track my order", "order tracking", "track my refund"),
    ("delete my account", "account deletion", "delete my comment"),
    ("update my credit card", "credit card update", "remove my credit card"),
    ("download my invoice", "invoice download", "download my contract"),
    ("contact customer support", "customer support contact", "contact the sales team"),
    ("return a damaged item", "damaged item return", "return an unopened item"),
    ("enable two-factor authentication", "two-factor authentication setup", "disable two-factor authentication"),
    ("change my email address", "email address change", "change my phone number"),
    ("upgrade my plan", "plan upgrade", "downgrade my plan"),
    ("export my data", "data export", "import my data"),
    ("add a team member", "team member invitation", "remove a team member"),
    ("get a refund", "refund request", "get a discount"),
    ("unsubscribe from the newsletter", "newsletter unsubscription", "subscribe to the newsletter"),
    ("apply a promo code", "promo code application", "apply a gift card"),
    ("change the language of the app", "app language change", "change the currency of the app"),
    ("merge two accounts", "account merge", "split two accounts"),
    ("verify my identity", "identity verification", "verify my address"),
    ("pause my membership", "membership pause", "end my membership"),
    ("recover a deleted file", "deleted file recovery", "recover a deleted message"),
    ("set up direct deposit", "direct deposit setup", "set up automatic payments"),
    ("report a bug", "bug report", "report a user"),
    ("change my username", "username change", "change my avatar"),
    ("connect my bank account", "bank account connection", "disconnect my bank account"),
    ("schedule a delivery", "delivery scheduling", "schedule a pickup"),
    ("print a shipping label", "shipping label printing", "print a packing slip"),
    ("turn on dark mode", "dark mode activation", "turn off dark mode"),
    ("change my payment date", "payment date change", "change my payment method"),
    ("sync my calendar", "calendar sync", "sync my contacts"),
    ("restore my purchases", "purchase restore", "restore my settings"),
    ("book a demo", "demo booking", "cancel a demo"),
    ("increase my storage limit", "storage limit increase", "decrease my storage limit"),
    ("transfer my domain", "domain transfer", "renew my domain"),
    ("find my order number", "order number lookup", "find my tracking number"),
    ("change my delivery window", "delivery window change", "change my delivery address"),
    ("set a spending limit", "spending limit setup", "remove a spending limit"),
    ("share a folder", "folder sharing", "share a file"),
    ("reactivate my account", "account reactivation", "deactivate my account"),
]
PHRASINGS = [
    "How do I {vp}?",
    "How can I {vp}?",
    "What is the process to {vp}?",
    "{NP} steps please",
    "Could you tell me how to {vp}?",
    "I want to {vp}, what should I do?",
    "Is there a way to {vp}?",
    "{NP}: how does it work?",
]


def faq_rows(rng: random.Random) -> list[dict]:
    rows: list[dict] = []
    order = list(range(len(INTENTS)))
    rng.shuffle(order)
    split_of = {i: ("dev" if rank < len(INTENTS) // 2 else "test") for rank, i in enumerate(order)}
    for i, (vp, np_, trap) in enumerate(INTENTS):
        fam = f"faq{i:02d}"
        for phr in rng.sample(PHRASINGS, 6):
            rows.append({"family": fam, "question": phr.format(vp=vp, NP=np_[0].upper() + np_[1:]),
                         "split": split_of[i], "kind": "paraphrase"})
        rows.append({"family": fam + "-trap", "question": rng.choice(PHRASINGS[:3]).format(vp=trap, NP=trap),
                     "split": split_of[i], "kind": "trap"})
    for split in ("dev", "test"):
        ids = [i for i in range(len(INTENTS)) if split_of[i] == split]
        for _ in range(10):
            a, b = rng.sample(ids, 2)
            rows.append({"family": f"faq{a:02d}+faq{b:02d}",
                         "question": f"How do I {INTENTS[a][0]} and how do I {INTENTS[b][0]}?",
                         "split": split, "kind": "two_part"})
    rng.shuffle(rows)
    return [{"id": f"faq-{n:03d}", **r} for n, r in enumerate(rows)]


def diverse_rows(rng: random.Random) -> list[dict]:
    questions: list[str] = []
    with open(ROUTER_DATA / "mtbench_questions.jsonl", encoding="utf-8") as f:
        questions += [json.loads(line)["turns"][0] for line in f if line.strip()]
    with open(ROUTER_DATA / "mmlu.jsonl", encoding="utf-8") as f:
        mmlu = [json.loads(line) for line in f if line.strip()]
    stems = [r["prompt"].split("\nA.")[0].strip() for r in mmlu if not r["truncated"]]
    stems = [s for s in stems if 30 <= len(s) <= 300 and "\n" not in s and "_" not in s]
    questions += rng.sample(sorted(set(stems)), 300 - len(questions))
    rng.shuffle(questions)
    return [{"id": f"div-{n:03d}", "family": f"div{n:03d}", "question": q, "split": "dev" if n % 2 else "test",
             "kind": "unique"} for n, q in enumerate(questions)]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("distill_faq", faq_rows(random.Random(SEED))), ("distill_diverse", diverse_rows(random.Random(SEED)))):
        with open(OUT / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(name, len(rows), {s: sum(r["split"] == s for r in rows) for s in ("dev", "test")})


if __name__ == "__main__":
    main()
