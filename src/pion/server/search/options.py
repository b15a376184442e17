"""FT.SEARCH's options after the query text (RediSearch's names, order-free, and errors).

    [NOCONTENT] [VERBATIM] [NOSTOPWORDS] [WITHSCORES] [INORDER] [EXPLAINSCORE]
    [FILTER <numeric field> <min> <max>]... [INKEYS n key...] [INFIELDS n field...]
    [RETURN n field [AS alias]...] [SORTBY field [ASC|DESC] [WITHCOUNT]] [LIMIT offset num]
    [PARAMS n name value...] [DIALECT 1..4] [SLOP n] [TIMEOUT ms] [LANGUAGE l]
    [SCORER name] [EXPANDER name]

SLOP, TIMEOUT, LANGUAGE, SCORER and EXPANDER are accepted and have no effect in this
build (BM25 is the only scorer); WITHPAYLOADS, SUMMARIZE, HIGHLIGHT, GEOFILTER are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pion.common.errors import CommandError, clip_for_echo
from pion.server.search.words import text as _text

IGNORED_WITH_VALUE = frozenset({"SLOP", "TIMEOUT", "LANGUAGE", "SCORER", "EXPANDER"})
MAX_LIMIT = 1_000_000


@dataclass
class SearchOptions:
    """Everything FT.SEARCH was asked besides the query text."""

    no_content: bool = False
    with_scores: bool = False
    no_stopwords: bool = False
    verbatim: bool = False
    filters: list[tuple[str, float, float, bool, bool]] = field(default_factory=list)
    in_keys: set[bytes] | None = None
    return_fields: list[tuple[str, str]] | None = None  # (field, alias as returned)
    sort_by: str | None = None
    sort_desc: bool = False
    offset: int = 0
    num: int = 10
    params: dict[str, bytes] = field(default_factory=dict)
    dialect: int = 2


def _number(raw: bytes, what: str) -> int:
    if not raw.isdigit() or len(raw) > 9:
        raise CommandError(f"Bad arguments for {what}: Could not convert argument to expected type")
    return int(raw)


def _bound(raw: bytes) -> tuple[float, bool]:
    text = _text(raw)
    exclusive = text.startswith("(")
    try:
        value = float(text[1:] if exclusive else text)
    except ValueError:
        raise CommandError(f"Bad upper range: {clip_for_echo(text)}") from None
    return value, exclusive


def take_params(args: list[bytes]) -> dict[str, bytes]:
    """``PARAMS n name value ...`` anywhere in ``args`` (FT.HYBRID needs them before parsing)."""
    params: dict[str, bytes] = {}
    for i, raw in enumerate(args):
        if raw.upper() == b"PARAMS" and i + 1 < len(args):
            n = _number(args[i + 1], "PARAMS")
            if n % 2 or i + 2 + n > len(args):
                raise CommandError("Bad arguments for PARAMS: Expected an even number of arguments")
            for j in range(i + 2, i + 2 + n, 2):
                params[_text(args[j])] = args[j + 1]
            break
    return params


def parse_options(args: list[bytes]) -> SearchOptions:
    """The words after FT.SEARCH's query text -> SearchOptions; -ERR like RediSearch."""
    opts = SearchOptions()
    i = 0

    def need(n: int, what: str) -> list[bytes]:
        if i + 1 + n > len(args):
            raise CommandError(f"{what} requires {'two' if n == 2 else n} argument{'s' if n != 1 else ''}")
        return args[i + 1:i + 1 + n]

    while i < len(args):
        opt = _text(args[i]).upper()
        if opt == "NOCONTENT":
            opts.no_content = True
        elif opt == "WITHSCORES":
            opts.with_scores = True
        elif opt == "NOSTOPWORDS":
            opts.no_stopwords = True
        elif opt == "VERBATIM":
            opts.verbatim = True
        elif opt in ("INORDER", "EXPLAINSCORE", "WITHSORTKEYS"):
            pass
        elif opt in IGNORED_WITH_VALUE:
            need(1, opt)
            i += 1
        elif opt == "LIMIT":
            off, num = need(2, "LIMIT")
            opts.offset, opts.num = _number(off, "LIMIT"), _number(num, "LIMIT")
            if opts.num > MAX_LIMIT:
                raise CommandError(f"LIMIT exceeds maximum of {MAX_LIMIT}")
            i += 2
        elif opt == "DIALECT":
            (raw,) = need(1, "DIALECT")
            if raw not in (b"1", b"2", b"3", b"4"):
                raise CommandError("DIALECT requires a non negative integer >=1 and <= 4")
            opts.dialect = int(raw)
            i += 1
        elif opt == "PARAMS":
            (raw,) = need(1, "PARAMS")
            n = _number(raw, "PARAMS")
            if n % 2:
                raise CommandError("Bad arguments for PARAMS: Expected an even number of arguments")
            pairs = need(n + 1, "PARAMS")[1:]
            for j in range(0, n, 2):
                opts.params[_text(pairs[j])] = pairs[j + 1]
            i += n + 1
        elif opt == "RETURN":
            (raw,) = need(1, "RETURN")
            n = _number(raw, "RETURN")
            words = [_text(w) for w in need(n + 1, "RETURN")[1:]]
            opts.return_fields = _return_fields(words)
            i += n + 1
        elif opt == "SORTBY":
            (name,) = need(1, "SORTBY")
            opts.sort_by = _text(name).lstrip("@")
            i += 1
            while i + 1 < len(args) and args[i + 1].upper() in (b"ASC", b"DESC", b"WITHCOUNT"):
                if args[i + 1].upper() == b"DESC":
                    opts.sort_desc = True
                i += 1
        elif opt == "FILTER":
            name, lo, hi = need(3, "FILTER")
            (lo_v, lo_ex), (hi_v, hi_ex) = _bound(lo), _bound(hi)
            opts.filters.append((_text(name).lstrip("@"), lo_v, hi_v, lo_ex, hi_ex))
            i += 3
        elif opt in ("INKEYS", "INFIELDS"):
            (raw,) = need(1, opt)
            n = _number(raw, opt)
            values = need(n + 1, opt)[1:]
            if opt == "INKEYS":
                opts.in_keys = set(values)
            i += n + 1
        else:
            raise CommandError(f"Unknown argument `{clip_for_echo(args[i])}` at position {i + 2} for <main>"
                               if opt not in ("WITHPAYLOADS", "SUMMARIZE", "HIGHLIGHT", "GEOFILTER", "PAYLOAD")
                               else f"{opt} is not supported by this build")
        i += 1
    return opts


def _return_fields(words: list[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    j = 0
    while j < len(words):
        name = words[j].lstrip("@")
        alias = name
        if j + 2 < len(words) + 1 and j + 1 < len(words) and words[j + 1].upper() == "AS":
            if j + 2 >= len(words):
                raise CommandError("RETURN: AS needs an alias")
            alias = words[j + 2]
            j += 2
        out.append((name, alias))
        j += 1
    return out
