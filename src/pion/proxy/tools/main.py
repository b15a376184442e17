"""``pion serve-tools generate-qa | replay | train-router``: build a replay set, replay it through
pion-serve, fit a learned route classifier for ``pion-serve --route-classifier``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

from pion.proxy.tools.generate_qa import generate
from pion.proxy.tools.replay import load_dataset, replay, summarize


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pion serve-tools", description=__doc__)
    sub = p.add_subparsers(dest="tool", required=True)
    g = sub.add_parser("generate-qa", help="questions from a document folder through a backend")
    g.add_argument("folder", type=Path)
    g.add_argument("--url", default="http://127.0.0.1:8322", help="OpenAI-compatible base URL (default pion-llm)")
    g.add_argument("--model", default="smollm2-135m")
    g.add_argument("--per-chunk", type=int, default=3)
    g.add_argument("--chunk-chars", type=int, default=1200)
    g.add_argument("--api-key")
    g.add_argument("--out", type=Path, help="JSONL output (default stdout)")
    r = sub.add_parser("replay", help="replay a JSONL data set through a running pion-serve")
    r.add_argument("dataset", type=Path)
    r.add_argument("--url", default="http://127.0.0.1:8321", help="pion-serve base URL")
    r.add_argument("--model", default="smollm2-135m")
    r.add_argument("--system", help="system prompt for every query (rows may carry their own)")
    r.add_argument("--api-key")
    r.add_argument("--out", type=Path, help="per-query JSONL (default: replay-<dataset>.jsonl)")
    t = sub.add_parser("train-router", help="fit a --route-classifier model file from labelled queries")
    t.add_argument("data", type=Path, help="JSONL: prompt + needs_strong, or prompt + strong_correct + weak_correct")
    t.add_argument("--out", type=Path, required=True, help="model file to write (.npz)")
    t.add_argument("--strong-share", type=float, default=0.5,
                   help="share of the training queries above the threshold (default 0.5)")
    t.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    t.add_argument("--margin", type=float, default=0.0,
                   help="medium band around the threshold, in score units (default 0: simple or complex only)")
    t.add_argument("--embeddings", type=Path, help=".npy of precomputed query vectors, one row per input row")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.tool == "train-router":
            from pion.proxy.tools.train_router import run

            return run(args.data, args.out, strong_share=args.strong_share, folds=args.folds,
                       embeddings=args.embeddings, margin=args.margin)
        if args.tool == "generate-qa":
            out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
            n = 0
            for row in generate(args.folder, args.url, args.model, args.per_chunk, args.chunk_chars,
                                api_key=args.api_key):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
            if args.out:
                out.close()
            if n == 0:
                # Seen with pion-llm's SmolLM2-135M: it answers or summarises the text instead of
                # writing questions (docs/proxy.md); an empty replay set is a failure, not a result.
                print(f"pion serve-tools: generate-qa: the backend's replies held no questions (no line "
                      f"ending in '?'); {args.model!r} may be too small to follow the instruction", file=sys.stderr)
                return 1
            print(f"generate-qa: {n} questions", file=sys.stderr)
            return 0
        rows = load_dataset(args.dataset)
        out_path = args.out or Path(f"replay-{args.dataset.stem}.jsonl")
        results = []
        with open(out_path, "w", encoding="utf-8") as f:
            for res in replay(rows, args.url, args.model, args.system, api_key=args.api_key):
                f.write(json.dumps(res, ensure_ascii=False) + "\n")
                results.append(res)
        print(summarize(results))
        print(f"per-query results: {out_path}", file=sys.stderr)
        return 0
    except (OSError, ValueError, httpx.HTTPError) as exc:
        print(f"pion serve-tools: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
