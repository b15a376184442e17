"""Key layout in the cold tier: everything of one prefix shares the ``{ns}`` hash tag.

  pion:{<ns>}:idx        hash: ``meta`` (JSON: kv_dim, formats, layers, block table, prefill_ms),
                         ``gen`` (the registration's generation, below) and
                         ``k:<layer>`` / ``v:<layer>`` -> rows stored in that layer
  pion:{<ns>}:k:<layer>  string: the K side's encoded rows of one layer, in its Pion format
  pion:{<ns>}:v:<layer>  string: the V side's

The hash tag puts a prefix in one slot, so it lives on one shard, moves as one when slots are
resharded, and one pipeline (one round trip) reads or writes all of it. The index is small
(a few hundred bytes plus 8 bytes per block hash), so a LOOKUP on a cold front costs one
round trip of one small reply.

Invalidation (docs/scale-out.md, "Consistency"): every fresh registration gets a random
generation ``gen``; a front that writes an index's meta, or drops a prefix, publishes
``<front> <gen|-> <ns>`` on the ``pion:invalidate`` channel (classic pub/sub: a cluster
broadcasts it to every node, so a subscriber on any node hears every front). A front holding a
warm copy of ``ns`` under another generation drops it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

SIDES = ("k", "v")
GEN_FIELD = "gen"
CHANNEL = "pion:invalidate"
DROPPED = "-"  # the generation an invalidation of a dropped prefix carries


def tag(ns: str) -> str:
    return "pion:{" + ns + "}"


def index_key(ns: str) -> str:
    return tag(ns) + ":idx"


def rows_key(ns: str, side: str, layer: int) -> str:
    return f"{tag(ns)}:{side}:{layer}"


def rows_field(side: str, layer: int) -> str:
    return f"{side}:{layer}"


def invalidation(front: str, gen: str | None, ns: str) -> str:
    """The message: the namespace goes last, so it may hold spaces."""
    return f"{front} {gen or DROPPED} {ns}"


def parse_invalidation(data: bytes | str) -> tuple[str, str | None, str] | None:
    """(front, gen or None for a drop, ns); None for a message that is not ours."""
    text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
    parts = text.split(" ", 2)
    if len(parts) != 3 or not parts[0] or not parts[1]:
        return None
    front, gen, ns = parts
    return front, None if gen == DROPPED else gen, ns


@dataclass(frozen=True, slots=True)
class PrefixMeta:
    """What REGISTER / REGISTER.SCHEMA recorded, enough to re-register on another front."""

    kv_dim: int
    k_formats: tuple[str, ...]
    v_formats: tuple[str, ...]
    uniform: bool
    layers: int | None = None
    block_size: int | None = None
    hashes: bytes | None = None
    prefill_ms: float | None = None

    def to_json(self) -> str:
        return json.dumps({"kv_dim": self.kv_dim, "k_formats": list(self.k_formats),
                           "v_formats": list(self.v_formats), "uniform": self.uniform,
                           "layers": self.layers, "block_size": self.block_size,
                           "hashes": None if self.hashes is None else self.hashes.hex(),
                           "prefill_ms": self.prefill_ms}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: bytes | str) -> PrefixMeta:
        d = json.loads(text)
        return cls(int(d["kv_dim"]), tuple(d["k_formats"]), tuple(d["v_formats"]), bool(d["uniform"]),
                   d.get("layers"), d.get("block_size"),
                   None if d.get("hashes") is None else bytes.fromhex(d["hashes"]), d.get("prefill_ms"))


@dataclass(frozen=True, slots=True)
class ColdIndex:
    """One prefix's index hash, decoded."""

    meta: PrefixMeta
    rows: dict[tuple[str, int], int] = field(default_factory=dict)  # (side, layer) -> rows
    gen: str | None = None  # None: written by a build without generations

    @classmethod
    def decode(cls, raw: dict[bytes, bytes]) -> ColdIndex | None:
        """None when the hash has no ``meta`` (nothing registered under this namespace)."""
        meta = raw.get(b"meta")
        if meta is None:
            return None
        rows: dict[tuple[str, int], int] = {}
        for name, value in raw.items():
            side, sep, layer = name.decode().partition(":")
            if sep and side in SIDES and layer.isdigit():
                rows[(side, int(layer))] = int(value)
        gen = raw.get(GEN_FIELD.encode())
        return cls(PrefixMeta.from_json(meta), rows, None if gen is None else gen.decode())

    def hit(self) -> bool:
        """The warm tier's rule (VStore.lookup_prefix): with LAYERS n, all 2n layers hold the
        same non-zero row count; without, the registration alone is a hit."""
        n = self.meta.layers
        if not n:
            return True
        counts = {self.rows.get((side, layer), 0) for side in SIDES for layer in range(n)}
        return len(counts) == 1 and 0 not in counts

    def tokens(self) -> int:
        return self.rows.get(("k", 0), 0)
