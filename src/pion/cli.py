"""``pion``: one command for the whole project.

    pion up      run pion-server + pion-llm + pion-serve (see ``pion.up``)
    pion server  = pion-server      pion llm = pion-llm      pion serve = pion-serve
    pion serve-tools generate-qa | replay | train-router   (see ``pion.proxy.tools``)
    pion rag ingest <index> <files|dirs>   chunk, embed and index documents for --rag-index

Each subcommand hands the rest of the command line to that program's own ``main`` (imported
lazily, so ``pion server`` never imports torch).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS = {
    "up": ("pion.up", "run", "run the whole stack: pion-server, pion-llm and pion-serve"),
    "server": ("pion.server.main", "main", "the KV-cache server (pion-server)"),
    "llm": ("pion.llm.main", "main", "the local OpenAI-compatible LLM server (pion-llm)"),
    "serve": ("pion.proxy.main", "main", "the OpenAI proxy with a semantic cache (pion-serve)"),
    "serve-tools": ("pion.proxy.tools.main", "main", "generate-qa / replay data sets through pion-serve, train-router"),
    "rag": ("pion.proxy.rag_ingest", "main", "build a RAG index: pion rag ingest <index> <files|dirs>"),
}


def usage() -> str:
    lines = ["usage: pion <command> [args...]", "", "commands:"]
    lines += [f"  {name:<8} {help_text}" for name, (_, _, help_text) in SUBCOMMANDS.items()]
    lines += ["", "`pion <command> --help` shows a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] == "--version":
        from pion import __version__

        print(f"pion {__version__}")
        return 0
    entry = SUBCOMMANDS.get(args[0])
    if entry is None:
        print(f"pion: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name, func_name, _ = entry
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        print(f"pion: `pion {args[0]}` is not available in this install ({exc})", file=sys.stderr)
        return 1
    result = getattr(module, func_name)(args[1:])
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
