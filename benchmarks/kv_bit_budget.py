"""The per-layer K/V bit choice of ``kv_bit_split.py``, kept free of torch so tests can run it.

Why a knapsack: every bit of K or V costs the same bytes a token (kv_dim/8 plus the same parameter
and sink-row bytes for each sink-row format), so "mean K + V bits <= 12 a layer" is the 39.8% budget,
and the layers' measured KLs are the values to minimise; with up to 4 x 4 pairs and 30 layers an exact
dynamic programme over bits used is instant.

The fifth round widened the menu to K 5..8 bits (``kivi8g128s``) and V 4..7 (``int4h64s128``): the same
24 bytes a bit at kv_dim 192, so the budget arithmetic is unchanged. A table may hold a pair for only
some layers (``None`` elsewhere: not measured there, so not offered there) -- the new cells were measured
only where the earlier table said they could pay.
"""

from __future__ import annotations

K_BITS = (5, 6, 7, 8)
V_BITS = (4, 5, 6, 7)
MEAN_BITS = 12  # K + V bits a layer on average: 306 bytes a token at kv_dim 192, 39.8% of fp16


def pair_formats(k_bits: int, v_bits: int) -> tuple[str, str]:
    """The sink-row formats for a (K bits, V bits) pair."""
    return f"kivi{k_bits}g128s", f"int{v_bits}h64s128"


def pair_key(k_bits: int, v_bits: int) -> str:
    return f"K{k_bits}/V{v_bits}"


def choose(kl: dict[str, list[float | None]], n_layers: int, same_bytes: bool) -> list[tuple[int, int]]:
    """One (K bits, V bits) per layer with the least summed KL and sum(bits) <= MEAN_BITS * n_layers
    (``same_bytes``: K + V == MEAN_BITS on every layer). ``kl`` maps pair_key -> KL per layer; pairs
    it lacks, or holds as None for a layer, are not used (there). Ties go to the pair listed first (fewer K
    bits, then fewer V bits)."""
    pairs = [(b, c) for b in K_BITS for c in V_BITS if pair_key(b, c) in kl and (not same_bytes or b + c == MEAN_BITS)]
    if not pairs:
        raise ValueError("no (K, V) pair in the table fits the budget")
    cheapest = min(b + c for b, c in pairs)
    budget = MEAN_BITS * n_layers
    best: dict[int, tuple[float, list[tuple[int, int]]]] = {0: (0.0, [])}  # bits used -> (KL, pairs so far)
    for layer in range(n_layers):
        nxt: dict[int, tuple[float, list[tuple[int, int]]]] = {}
        for used, (total, chosen) in sorted(best.items()):
            for b, c in pairs:
                bits = used + b + c
                value = kl[pair_key(b, c)][layer]
                if value is None or bits + cheapest * (n_layers - layer - 1) > budget:
                    continue
                cand = total + value
                if bits not in nxt or cand < nxt[bits][0]:
                    nxt[bits] = (cand, chosen + [(b, c)])
        best = nxt
    if not best:
        raise ValueError("the budget is below the cheapest pair on every layer")
    return min(best.values(), key=lambda item: item[0])[1]
