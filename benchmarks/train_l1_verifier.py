"""Reproduce ``src/pion/proxy/learned_verifier.json``: the weights of ``--verifier learned``.

    python benchmarks/train_l1_verifier.py            # fit, print train/dev, write the weights
    python benchmarks/train_l1_verifier.py --dry-run  # fit and print only

Which split decides what. This trainer still reads train and dev only. Since issue 18's
sixth round test, test2 and test3 are spent (scored, then open to training and tuning);
the fresh held-out test4 and test5 are never read: ``load_items()`` opens only the first
set's files, and the cross-encoder's trainer refuses them by name (``check_splits``):
  * train: the logistic coefficients (and the feature standardisation), fitted on the
    train items whose hard checks pass and whose sentence cosine reaches the floor, i.e.
    the pairs the verifier would actually be asked about;
  * train, synthetic (``--synthetic``, on by default): the train split's traps are mostly
    scope additions and particles (on/off); opposite actions that WordNet does not list
    (read/write, create/delete) barely reach the score stage, so the fit never learned
    that one poorly aligned word in an otherwise identical question is a trap. For each
    train question one content word is replaced by a content word of another train
    question that neither stem nor WordNet relates to it (a different request: label trap),
    and each train question paired with itself is a positive. Seeded; train texts only;
  * train, refused items too (``--no-fit-refused`` turns it off): the fit also sees the
    train pairs the hard checks refuse (opposite actions, swapped names): more examples
    of what a trap looks like to the token alignment, for the traps the checks miss;
  * dev: the candidate floor (0.65-0.8), the regularisation C and the score threshold:
    the most dev paraphrase pairs served (+ a quarter of the dev conversation share) with
    <= 1.5% of dev trap pairs and no dev trap conversation served, a margin under the 2% goal,
    and (``--no-train-bound`` turns it off) <= 1.5% of the train split's own trap pairs:
    a threshold that serves more of the traps the model was fitted on will not hold on
    unseen families.

Third round (after the enlarged train/dev splits, before the third scoring of test), on
dev: refused items fitted + train bound 83.6% of dev paraphrase pairs / 1.4% dev traps;
hard-passing items only + train bound 75.8% / 1.4%; refused items fitted, no train bound
84.4% / 1.4% but 3.0% of the train traps served. The first is the default.

Data: ``benchmarks/data/semantic_eval_pairs.jsonl`` and ``semantic_eval_conversations.jsonl``
(split by domain family before any tuning; see ``semantic_cache_eval.py``).
Needs scikit-learn (installed in the dev venv); pion-serve itself only reads the JSON.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from semantic_cache_eval import Item, load_items  # noqa: E402

from pion.proxy import guard  # noqa: E402
from pion.proxy.learned_verifier import WEIGHTS, LearnedWeights, pair_features  # noqa: E402
from pion.proxy.token_align import Encoded, TokenEncoder  # noqa: E402
from pion.proxy.verifier import Verifier  # noqa: E402

FLOORS = (0.65, 0.7, 0.75, 0.8)
CS = (0.1, 0.3, 1.0, 3.0)
TRAP_BOUND = 0.015  # dev trap pairs served at most; dev trap conversations: none
CONV_WEIGHT = 0.25  # how much the dev conversation share counts next to the pair share


def synthetic_items(train: list[Item], verifier: Verifier, encoder: TokenEncoder, near: bool,
                    seed: int = 18) -> list[Item]:
    """Swapped-word traps and identity positives from the train questions (see the docstring).

    Per question: one content word replaced by a random train word and, with ``near``, also
    by one of its five nearest train words in MiniLM's static word-piece space (create for
    delete: the hard case); only when neither stem nor WordNet relates the two words.
    ``near`` was tried and left off on dev: dev paraphrase pairs served 76.4% with it,
    84.3% without, both at 1.3% dev traps."""
    rng = random.Random(seed)
    questions = sorted({t for it in train if it.kind == "pair" for t in (it.a, it.b)})
    vocab = sorted({w for q in questions for w in guard.content_words(q) if w.isalpha() and len(w) > 2})
    static = {e.text: e.static[0] for e in encoder.encode(vocab) if len(e.words) == 1}
    vocab = [w for w in vocab if w in static]
    matrix = np.stack([static[w] for w in vocab])

    def unrelated(w: str, other: str) -> bool:
        return not (guard.same_word(w, other) or verifier.lexicon.related(w, other)
                    or verifier.lexicon.synonyms(w, other))

    out: list[Item] = []
    for q in questions:
        words = [w for w in guard.content_words(q) if w in static]
        if words:
            w = rng.choice(words)
            close = [vocab[i] for i in np.argsort(-(matrix @ static[w]))[1:40] if unrelated(w, vocab[i])][:5]
            far = [o for o in rng.sample(vocab, min(20, len(vocab))) if unrelated(w, o)][:1]
            for other in far + ([rng.choice(close)] if near and close else []):
                swapped = _replace_word(q, w, other)
                if swapped != q:
                    out.append(Item("pair", "train", "synthetic_swap", q, swapped))
        out.append(Item("pair", "train", "paraphrase", q, q))
    return out


def _replace_word(text: str, word: str, new: str) -> str:
    """``text`` with the first whole-word, case-insensitive ``word`` replaced by ``new``."""
    import re

    return re.sub(rf"\b{re.escape(word)}\b", new, text, count=1, flags=re.IGNORECASE)


def encode_all(items: list[Item], encoder: TokenEncoder) -> dict[str, Encoded]:
    texts = sorted({t for it in items for t in (it.a, it.b)})
    out: dict[str, Encoded] = {}
    for i in range(0, len(texts), 32):
        for enc in encoder.encode(texts[i:i + 32]):
            out[enc.text] = enc
    return out


def feature_table(items: list[Item], verifier: Verifier, encoded: dict[str, Encoded]) -> tuple[np.ndarray, np.ndarray]:
    """(features, hard_ok) per item: (new question ``b``, cached question ``a``)."""
    x = np.array([pair_features(verifier, encoded[it.b], encoded[it.a]) for it in items])
    hard = np.array([verifier.hard_check(it.b, it.a).ok for it in items])
    return x, hard


def fit_one(x: np.ndarray, y: np.ndarray, c: float, floor: float) -> LearnedWeights:
    from sklearn.linear_model import LogisticRegression

    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    model = LogisticRegression(C=c, max_iter=5000).fit((x - mean) / scale, y)
    return LearnedWeights(mean, scale, model.coef_[0].astype(np.float64), float(model.intercept_[0]), floor, 1.0)


def served(w: LearnedWeights, x: np.ndarray, hard: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(scores, candidate mask): the score of every item that reaches the score stage."""
    cand = hard & (x[:, 0] >= w.floor)
    scores = np.array([w.score(row) if ok else -1.0 for row, ok in zip(x, cand, strict=True)])
    return scores, cand


def best_threshold(scores: np.ndarray, hit: np.ndarray, pair: np.ndarray,
                   train_trap_scores: np.ndarray | None = None) -> tuple[float, float] | None:
    """(objective, threshold) on dev items: the lowest threshold that keeps the trap bounds
    (with ``train_trap_scores``, the train split's own trap pairs held to the same bound)."""
    best: tuple[float, float] | None = None
    for t in np.unique(np.concatenate([scores[scores >= 0], [1.0]])):
        s = scores >= t
        if s[pair & ~hit].mean() > TRAP_BOUND or s[~pair & ~hit].sum() > 0:
            continue
        if train_trap_scores is not None and (train_trap_scores >= t).mean() > TRAP_BOUND:
            continue
        objective = s[pair & hit].mean() + CONV_WEIGHT * s[~pair & hit].mean()
        if best is None or objective > best[0] + 1e-9:
            best = (float(objective), float(t))
    return best


def report(name: str, s: np.ndarray, hit: np.ndarray, pair: np.ndarray) -> str:
    return (f"{name}: pairs {s[pair & hit].mean():.1%} paraphrases / {s[pair & ~hit].mean():.1%} traps, "
            f"conversations {s[~pair & hit].mean():.1%} / {s[~pair & ~hit].mean():.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print, do not write the weights")
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    parser.add_argument("--no-synthetic", dest="synthetic", action="store_false",
                        help="fit on the train split's own items only")
    parser.add_argument("--no-train-bound", dest="train_bound", action="store_false",
                        help="bound only the dev traps (before the third round: train traps unbounded)")
    parser.add_argument("--no-fit-refused", dest="fit_refused", action="store_false",
                        help="fit only on train items the hard checks pass (before the third round)")
    parser.add_argument("--near-swaps", action="store_true",
                        help="also swap words for their nearest unrelated neighbours (dev preferred off)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    items = [it for it in load_items() if it.split in ("train", "dev")]  # train/dev; never test4/test5
    verifier = Verifier()
    verifier.load()
    encoder = TokenEncoder(threads=1)
    if args.synthetic:
        extra = synthetic_items([it for it in items if it.split == "train"], verifier, encoder, args.near_swaps)
        print(f"synthetic train items: {sum(it.category == 'synthetic_swap' for it in extra)} swapped-word traps, "
              f"{sum(it.hit for it in extra)} identity positives")
        items += extra
    t0 = time.perf_counter()
    encoded = encode_all(items, encoder)
    print(f"encoded {len(encoded)} train/dev texts in {time.perf_counter() - t0:.1f} s")
    x, hard = feature_table(items, verifier, encoded)
    hit = np.array([it.hit for it in items])
    pair = np.array([it.kind == "pair" for it in items])
    train = np.array([it.split == "train" for it in items])
    dev = ~train
    real_train = train & np.array([it.a != it.b and it.category != "synthetic_swap" for it in items])
    best: tuple[float, LearnedWeights] | None = None
    for floor in FLOORS:
        fit_rows = train & (hard | args.fit_refused) & (x[:, 0] >= floor)
        for c in CS:
            w = fit_one(x[fit_rows], hit[fit_rows], c, floor)
            scores, _ = served(w, x[dev], hard[dev])
            train_traps = None
            if args.train_bound:
                sel = real_train & pair & ~hit
                train_traps = served(w, x[sel], hard[sel])[0]
            found = best_threshold(scores, hit[dev], pair[dev], train_traps)
            if found is None:
                continue
            print(f"  floor {floor} C {c}: dev objective {found[0]:.3f} at threshold {found[1]:.4f}")
            if best is None or found[0] > best[0] + 1e-9:
                best = (found[0], LearnedWeights(w.mean, w.scale, w.coef, w.intercept, floor, found[1]))
    if best is None:
        raise SystemExit("no floor/C/threshold meets the dev trap bounds")
    w = best[1]
    print(f"chosen on dev: floor {w.floor}, threshold {w.threshold:.4f}")
    for name, sel in (("train", train), ("dev", dev)):
        real = sel & np.array([it.a != it.b and it.category != "synthetic_swap" for it in items])
        scores, _ = served(w, x[real], hard[real])
        print(report(name, scores >= w.threshold, hit[real], pair[real]))
    if not args.dry_run:
        args.out.write_text(w.to_json("benchmarks/train_l1_verifier.py: coef on train"
                                     f"{' + synthetic swaps' if args.synthetic else ''}"
                                     f"{' (hard-refused items too)' if args.fit_refused else ''}, "
                                     f"floor/C/threshold on dev{' + train trap bound' if args.train_bound else ''}"))
        print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
