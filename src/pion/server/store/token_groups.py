"""Row ranges of formats that encode G consecutive rows together (the kivi K formats).

Why: a kivi row holds only its share of its token group's per-channel parameters, and the last
``n % G`` rows of a layer are encoded per token (docs/formats.md). So the V-store keeps two
rules for such a layer (G = ``token_group(codec)``, 1 for every per-row format, where both
rules are no-ops):

* a write starts at a multiple of G and ends at a multiple of G or at/after the layer's end --
  it never leaves a group half old and half new (extending a partial tail means re-sending the
  tail's rows with the new ones, from the group's first row); and a write that rewrites the last
  full group before a partial tail must rewrite the tail too (tail rows may be stored relative to
  that group's channel ranges);
* a read of rows ``a..b`` decodes the enclosing whole groups ``G*floor(a/G) .. min(n, G*ceil(b/G))``
  -- reaching one group further back when it includes tail rows -- and slices, so every decode
  sees a blob that starts on a group and whose trailing partial group, if any, is the layer's
  real tail with the group before it. ``DTYPE raw`` returns exactly rows ``a..b``; they are
  decodable on their own when a is a multiple of G and b is one, or a = 0 and b the layer's end.
"""

from __future__ import annotations

import numpy as np

from pion.codecs import Codec
from pion.codecs.base import token_group
from pion.server.errors import token_group_error


def check_store_range(codec: Codec, fmt: str, start_id: int, end_id: int, n_rows: int) -> None:
    """CommandError when writing rows ``start_id..end_id`` into a layer of ``n_rows`` splits a group."""
    group = token_group(codec)
    if group == 1:
        return
    if start_id % group or (end_id % group and end_id < n_rows):
        raise token_group_error(fmt, group, start_id, end_id, n_rows)
    tail_start = n_rows - n_rows % group
    if n_rows % group and tail_start - group < end_id < n_rows:  # rewrites the tail's reference group only
        raise token_group_error(fmt, group, start_id, end_id, n_rows)


def enclosing_groups(codec: Codec, start_id: int, end_id: int, n_rows: int) -> tuple[int, int]:
    """The smallest group-aligned row range holding ``start_id..end_id`` (clipped to the layer)."""
    group = token_group(codec)
    if group == 1:
        return start_id, end_id
    lo = start_id - start_id % group
    hi = min(n_rows, -(-end_id // group) * group)
    tail_start = n_rows - n_rows % group
    if hi > tail_start >= group:  # tail rows: also the group their relative rows refer to
        lo = min(lo, tail_start - group)
    return lo, hi


def gather_ids(codec: Codec, ids: list[int], n_rows: int) -> tuple[int, int, np.ndarray]:
    """For the legacy V.FETCH <ids> form: (rows to decode lo..hi, positions of ``ids`` inside them)."""
    arr = np.asarray(ids, dtype=np.int64)
    lo, hi = enclosing_groups(codec, int(arr.min()), int(arr.max()) + 1, n_rows)
    return lo, hi, arr - lo
