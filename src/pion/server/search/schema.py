"""FT.CREATE's arguments as a typed index definition (RediSearch's syntax and error texts).

    FT.CREATE <idx> [ON HASH] [PREFIX n p ...] [STOPWORDS n w ...] [SCORE d] [LANGUAGE l]
              [MAXTEXTFIELDS] [NOOFFSETS] [NOHL] [NOFIELDS] [NOFREQS] [SKIPINITIALSCAN]
              SCHEMA <field> [AS <alias>] TEXT [WEIGHT w] [NOSTEM] [SORTABLE] [NOINDEX]
                   | <field> [AS <alias>] TAG [SEPARATOR c] [CASESENSITIVE] [SORTABLE]
                   | <field> [AS <alias>] NUMERIC [SORTABLE]
                   | <field> [AS <alias>] VECTOR FLAT|HNSW <n> TYPE FLOAT32 DIM <d>
                         DISTANCE_METRIC COSINE|L2|IP [M m] [EF_CONSTRUCTION e] [EF_RUNTIME e]
                         [INITIAL_CAP c] [BLOCK_SIZE b] [EPSILON x]

The raw words are kept (``IndexDefinition.args``) so the definition is logged and
snapshotted as the command that made it, and replay parses it again.
Only ``ON HASH`` exists in this build (``ON JSON`` is refused: no JSON keyspace).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pion.common.errors import CommandError, clip_for_echo
from pion.server.search.words import Words, count, text

FIELD_TYPES = ("TEXT", "TAG", "NUMERIC", "VECTOR")
METRICS = ("COSINE", "L2", "IP")
ALGORITHMS = ("FLAT", "HNSW")
MAX_DIM = 32768
FLAGS_WITHOUT_VALUE = frozenset({"MAXTEXTFIELDS", "NOOFFSETS", "NOHL", "NOFIELDS", "NOFREQS",
                                 "SKIPINITIALSCAN", "ASYNC"})
FLAGS_WITH_VALUE = frozenset({"LANGUAGE", "LANGUAGE_FIELD", "SCORE", "SCORE_FIELD",
                              "PAYLOAD_FIELD", "TEMPORARY", "FILTER"})


@dataclass(frozen=True)
class VectorParams:
    """A VECTOR field's index parameters."""

    algorithm: str  # FLAT | HNSW
    dim: int
    metric: str  # COSINE | L2 | IP
    m: int = 16
    ef_construction: int = 200
    ef_runtime: int = 10
    initial_cap: int = 1024

    @property
    def blob_bytes(self) -> int:
        return self.dim * 4


@dataclass(frozen=True)
class FieldSpec:
    """One SCHEMA entry: the hash field it reads and the name queries use."""

    name: str  # the hash field
    alias: str  # @alias in queries (the name itself without AS)
    kind: str  # TEXT | TAG | NUMERIC | VECTOR
    weight: float = 1.0
    nostem: bool = False
    sortable: bool = False
    noindex: bool = False
    separator: str = ","
    case_sensitive: bool = False
    vector: VectorParams | None = None


@dataclass(frozen=True)
class IndexDefinition:
    """A parsed FT.CREATE."""

    name: str
    prefixes: tuple[bytes, ...]
    fields: tuple[FieldSpec, ...]
    stopwords: tuple[str, ...] | None  # None: the default list
    args: tuple[bytes, ...] = field(repr=False)
    skip_initial_scan: bool = False

    def field(self, alias: str) -> FieldSpec | None:
        for spec in self.fields:
            if spec.alias == alias:
                return spec
        return None


def parse_create(name: str, args: list[bytes]) -> IndexDefinition:
    """FT.CREATE's words after the index name -> IndexDefinition; -ERR for anything wrong."""
    words = Words(args)
    prefixes: list[bytes] = []
    stopwords: tuple[str, ...] | None = None
    skip_scan = False
    while words.more() and words.peek() != "SCHEMA":
        opt = words.peek()
        words.pos += 1
        if opt == "ON":
            kind = text(words.take("ON")).upper()
            if kind != "HASH":
                raise CommandError(f"Invalid key type `{clip_for_echo(kind)}`: this build indexes HASH only")
        elif opt == "PREFIX":
            n = count(words.take("PREFIX"), "PREFIX")
            prefixes.extend(words.take("PREFIX") for _ in range(n))
        elif opt == "STOPWORDS":
            n = count(words.take("STOPWORDS"), "STOPWORDS")
            stopwords = tuple(text(words.take("STOPWORDS")).lower() for _ in range(n))
        elif opt in FLAGS_WITHOUT_VALUE:
            skip_scan = skip_scan or opt == "SKIPINITIALSCAN"
        elif opt in FLAGS_WITH_VALUE:
            words.take(opt)
        else:
            raise CommandError(f"Unknown argument `{clip_for_echo(args[words.pos - 1])}`")
    if not words.more():
        raise CommandError("No schema found")
    words.pos += 1  # SCHEMA
    fields: list[FieldSpec] = []
    while words.more():
        fields.append(_parse_field(words))
    if not fields:
        raise CommandError("Fields arguments are missing")
    seen: set[str] = set()
    for spec in fields:
        if spec.alias in seen:
            raise CommandError(f"Duplicate field in schema - {clip_for_echo(spec.alias)}")
        seen.add(spec.alias)
    return IndexDefinition(name, tuple(prefixes) or (b"",), tuple(fields), stopwords,
                           tuple(args), skip_scan)


def _parse_field(words: Words) -> FieldSpec:
    name = text(words.take("SCHEMA"))
    alias = name
    if words.peek() == "AS":
        words.pos += 1
        alias = text(words.take("AS"))
    kind = words.peek()
    if kind not in FIELD_TYPES:
        raise CommandError(f"Invalid field type for field `{clip_for_echo(alias)}`")
    words.pos += 1
    if kind == "VECTOR":
        return FieldSpec(name, alias, kind, vector=_parse_vector(words))
    opts: dict[str, object] = {}
    while words.more():
        opt = words.peek()
        if opt == "WEIGHT" and kind == "TEXT":
            words.pos += 1
            try:
                opts["weight"] = float(words.take("WEIGHT"))
            except ValueError:
                raise CommandError("Bad arguments for WEIGHT: Could not convert argument to expected type") from None
        elif opt == "SEPARATOR" and kind == "TAG":
            words.pos += 1
            sep = text(words.take("SEPARATOR"))
            if len(sep) != 1:
                raise CommandError(f"Tag separator must be a single character. Got `{clip_for_echo(sep)}`")
            opts["separator"] = sep
        elif opt == "NOSTEM" and kind == "TEXT":
            words.pos += 1
            opts["nostem"] = True
        elif opt == "CASESENSITIVE" and kind == "TAG":
            words.pos += 1
            opts["case_sensitive"] = True
        elif opt in ("SORTABLE", "UNF"):
            words.pos += 1
            opts["sortable"] = True
        elif opt == "NOINDEX":
            words.pos += 1
            opts["noindex"] = True
        elif opt in ("PHONETIC", "WITHSUFFIXTRIE", "INDEXEMPTY", "INDEXMISSING"):
            words.pos += 1
            if opt == "PHONETIC":
                words.take(opt)
        else:
            break
    return FieldSpec(name, alias, kind, **opts)  # type: ignore[arg-type]


def _vector_error(algorithm: str, what: str, why: str) -> CommandError:
    return CommandError(f"Bad arguments for vector similarity {algorithm} index {what}: {why}")


def _parse_vector(words: Words) -> VectorParams:
    algorithm = words.peek()
    if algorithm not in ALGORITHMS:
        raise CommandError("Bad arguments for vector similarity algorithm: Unknown argument")
    words.pos += 1
    n = count(words.take("vector similarity number of parameters"), "vector similarity number of parameters")
    if n % 2:
        raise CommandError("Bad number of arguments for vector similarity index: got "
                           f"{n} but expected even number (as algorithm parameters should be "
                           "submitted as named arguments)")
    params: dict[str, str] = {}
    for _ in range(n // 2):
        key = text(words.take("vector similarity")).upper()
        params[key] = text(words.take("vector similarity"))
    known = {"TYPE", "DIM", "DISTANCE_METRIC", "INITIAL_CAP", "BLOCK_SIZE", "M", "EF_CONSTRUCTION",
             "EF_RUNTIME", "EPSILON"}
    for key in params:
        if key not in known:
            raise _vector_error(algorithm, "argument", f"Unknown argument `{clip_for_echo(key)}`")
    for key in ("TYPE", "DIM", "DISTANCE_METRIC"):
        if key not in params:
            raise CommandError(f"Missing mandatory parameter: cannot create {algorithm} index "
                               f"without specifying {key} argument")
    if params["TYPE"].upper() != "FLOAT32":
        raise _vector_error(algorithm, "type", "Unknown argument (this build stores FLOAT32 vectors)")
    metric = params["DISTANCE_METRIC"].upper()
    if metric not in METRICS:
        raise _vector_error(algorithm, "metric", "Unknown argument")

    def number(key: str, default: int, lo: int, hi: int) -> int:
        raw = params.get(key)
        if raw is None:
            return default
        if not raw.isdigit() or not lo <= int(raw) <= hi:
            raise _vector_error(algorithm, key.lower(), "Value is outside acceptable bounds")
        return int(raw)

    return VectorParams(algorithm, number("DIM", 0, 1, MAX_DIM), metric,
                        m=number("M", 16, 1, 512), ef_construction=number("EF_CONSTRUCTION", 200, 1, 4096),
                        ef_runtime=number("EF_RUNTIME", 10, 1, 4096),
                        initial_cap=number("INITIAL_CAP", 1024, 0, 2**31))
