"""The FT.SEARCH query language (RediSearch DIALECT 2 subset) -> a small syntax tree.

    query   := expr [ "=>[" KNN <k|$k> @<vec> $<blob> [EF_RUNTIME <n|$n>] [AS <alias>] "]" ]
    expr    := and ( "|" and )*                 union; a space (AND) binds tighter
    and     := unary+
    unary   := "-" unary | "~" unary | atom     negation / optional
    atom    := "(" expr ")" | "*" | "@"<field>":" fieldexpr | '"'phrase'"' | term | $param
    fieldexpr := "{" tag ( "|" tag )* "}"       TAG (a value may be $param; "\\" escapes)
               | "[" num num "]"                NUMERIC, "(" before a bound = exclusive,
                                                -inf / +inf / inf / $param
               | "(" expr ")" | '"'phrase'"' | term
    term    := word [ "*" ]                     a trailing * is a prefix query

``$name`` takes the value from PARAMS. Errors use RediSearch's wording
(``Syntax error at offset N near X``, ``No such parameter `x```).
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.common.errors import CommandError, clip_for_echo

Params = dict[str, bytes]


@dataclass(frozen=True)
class AllNode:
    """``*``: every document."""


@dataclass(frozen=True)
class TermNode:
    field: str | None
    word: str
    prefix: bool = False


@dataclass(frozen=True)
class PhraseNode:
    field: str | None
    words: tuple[str, ...]


@dataclass(frozen=True)
class TagNode:
    field: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class NumericNode:
    field: str
    lo: float
    hi: float
    lo_exclusive: bool = False
    hi_exclusive: bool = False


@dataclass(frozen=True)
class AndNode:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class OrNode:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class NotNode:
    child: Node


@dataclass(frozen=True)
class OptionalNode:
    child: Node


Node = AllNode | TermNode | PhraseNode | TagNode | NumericNode | AndNode | OrNode | NotNode | OptionalNode


@dataclass(frozen=True)
class KnnClause:
    """``=>[KNN k @field $blob ...]``: the k nearest of the filter's matches."""

    k: int
    field: str
    vector: bytes
    ef_runtime: int | None = None
    alias: str | None = None


@dataclass(frozen=True)
class Query:
    filter: Node
    knn: KnnClause | None = None


_WORD_STOP = set(" \t\r\n()|{}[]@\"'-~:*,;!#%^&=+<>/?`")  # '$' starts params only at word start


class QueryParser:
    """Recursive descent over the query text."""

    def __init__(self, text: str, params: Params) -> None:
        self.text = text
        self.pos = 0
        self.params = params

    # ---- helpers ------------------------------------------------------------------------
    def error(self) -> CommandError:
        near = self.text[self.pos:self.pos + 10].split()[0] if self.text[self.pos:].strip() else ""
        return CommandError(f"Syntax error at offset {self.pos} near {clip_for_echo(near)}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise self.error()
        self.pos += 1

    def param(self) -> bytes:
        """``$name`` at the cursor -> its PARAMS value."""
        self.expect("$")
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] == "_"):
            self.pos += 1
        name = self.text[start:self.pos]
        if not name:
            raise self.error()
        if name not in self.params:
            raise CommandError(f"No such parameter `{clip_for_echo(name)}`")
        return self.params[name]

    def word(self) -> str:
        """A bare word; backslash escapes one character."""
        self.skip_ws()
        out = []
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "\\" and self.pos + 1 < len(self.text):
                out.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if c in _WORD_STOP or c.isspace():
                break
            out.append(c)
            self.pos += 1
        if not out:
            raise self.error()
        return "".join(out)

    # ---- grammar ----------------------------------------------------------------------------
    def parse(self) -> Query:
        node = self.expr()
        knn = None
        if self.peek() == "=":
            knn = self.knn()
        if self.peek():
            raise self.error()
        return Query(node, knn)

    def expr(self) -> Node:
        branches = [self.conj()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.conj())
        return branches[0] if len(branches) == 1 else OrNode(tuple(branches))

    def conj(self) -> Node:
        parts: list[Node] = []
        while self.peek() not in ("", "|", ")", "="):
            parts.append(self.unary())
        if not parts:
            raise self.error()
        return parts[0] if len(parts) == 1 else AndNode(tuple(parts))

    def unary(self) -> Node:
        c = self.peek()
        if c == "-":
            self.pos += 1
            return NotNode(self.unary())
        if c == "~":
            self.pos += 1
            return OptionalNode(self.unary())
        return self.atom(None)

    def atom(self, field_name: str | None) -> Node:
        c = self.peek()
        if c == "(":
            self.pos += 1
            node = self.expr() if field_name is None else self.field_group(field_name)
            self.expect(")")
            return node
        if c == "*" and field_name is None:
            self.pos += 1
            return AllNode()
        if c == "@" and field_name is None:
            self.pos += 1
            name = self.word()
            self.expect(":")
            return self.field_expr(name)
        if c == '"':
            return self.phrase(field_name)
        if c == "$":
            value = self.param().decode("utf-8", "replace")
            return TermNode(field_name, value)
        word = self.word()
        if self.pos < len(self.text) and self.text[self.pos] == "*":
            self.pos += 1
            return TermNode(field_name, word, prefix=True)
        return TermNode(field_name, word)

    def field_group(self, field_name: str) -> Node:
        branches: list[Node] = []
        parts: list[Node] = []
        while self.peek() not in ("", ")"):
            if self.peek() == "|":
                self.pos += 1
                branches.append(parts[0] if len(parts) == 1 else AndNode(tuple(parts)))
                parts = []
                continue
            if self.peek() == "-":
                self.pos += 1
                parts.append(NotNode(self.atom(field_name)))
            else:
                parts.append(self.atom(field_name))
        if not parts:
            raise self.error()
        branches.append(parts[0] if len(parts) == 1 else AndNode(tuple(parts)))
        return branches[0] if len(branches) == 1 else OrNode(tuple(branches))

    def field_expr(self, name: str) -> Node:
        c = self.peek()
        if c == "{":
            self.pos += 1
            return TagNode(name, self.tags())
        if c == "[":
            self.pos += 1
            lo, lo_ex = self.bound()
            hi, hi_ex = self.bound()
            self.expect("]")
            return NumericNode(name, lo, hi, lo_ex, hi_ex)
        return self.atom(name)

    def tags(self) -> tuple[str, ...]:
        values: list[str] = []
        current: list[str] = []
        while True:
            if self.pos >= len(self.text):
                raise self.error()
            c = self.text[self.pos]
            if c == "\\" and self.pos + 1 < len(self.text):
                current.append(self.text[self.pos + 1])
                self.pos += 2
            elif c == "$" and not "".join(current).strip():
                current = [self.param().decode("utf-8", "replace")]
            elif c in "|}":
                self.pos += 1
                value = "".join(current).strip()
                if not value:
                    raise self.error()
                values.append(value)
                current = []
                if c == "}":
                    return tuple(values)
            else:
                current.append(c)
                self.pos += 1

    def bound(self) -> tuple[float, bool]:
        exclusive = False
        if self.peek() == "(":
            exclusive = True
            self.pos += 1
        if self.peek() == "$":
            raw = self.param().decode("utf-8", "replace")
        else:
            self.skip_ws()
            start = self.pos
            while self.pos < len(self.text) and not self.text[self.pos].isspace() and self.text[self.pos] != "]":
                self.pos += 1
            raw = self.text[start:self.pos]
        try:
            value = float(raw)
        except ValueError:
            raise self.error() from None
        if value != value:  # NaN
            raise self.error()
        return value, exclusive

    def phrase(self, field_name: str | None) -> Node:
        self.expect('"')
        end = self.text.find('"', self.pos)
        if end < 0:
            raise self.error()
        words = tuple(self.text[self.pos:end].split())
        self.pos = end + 1
        if not words:
            raise self.error()
        return PhraseNode(field_name, words)

    def knn(self) -> KnnClause:
        if not self.text.startswith("=>", self.pos):
            raise self.error()
        self.pos += 2
        self.expect("[")
        if self.word().upper() != "KNN":
            raise CommandError("Syntax error: expected KNN after =>[ (vector range queries are not supported)")
        k = self.int_or_param()
        self.expect("@")
        field_name = self.word()
        if self.peek() != "$":
            raise self.error()
        blob = self.param()
        ef: int | None = None
        alias: str | None = None
        while self.peek() not in ("]", ""):
            opt = self.word().upper()
            if opt == "EF_RUNTIME":
                ef = self.int_or_param()
                if ef < 1:
                    raise CommandError("EF_RUNTIME must be a positive integer")
            elif opt == "AS":
                alias = self.word()
            else:
                raise CommandError(f"Unknown attribute `{clip_for_echo(opt)}` in KNN query")
        self.expect("]")
        return KnnClause(k, field_name, blob, ef, alias)

    def int_or_param(self) -> int:
        raw = self.param().decode("utf-8", "replace") if self.peek() == "$" else self.word()
        if not raw.isdigit() or len(raw) > 9:
            raise CommandError(f"Invalid value `{clip_for_echo(raw)}`: expected a non-negative integer")
        return int(raw)


def parse_query(text: str, params: Params | None = None) -> Query:
    """Query text -> Query; CommandError with RediSearch's wording when it is malformed."""
    if not text.strip():
        raise CommandError("Syntax error at offset 0 near ")
    return QueryParser(text, params or {}).parse()
