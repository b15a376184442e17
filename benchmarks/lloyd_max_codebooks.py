"""Recompute the turbo codecs' constants: Lloyd-Max Gaussian codebooks and the sign mask.

The codebooks hard-coded in ``pion.codecs.turbo`` are the optimal (minimum-MSE)
scalar quantizers for a standard normal variable at 2, 3 and 4 bits, found by
Lloyd's algorithm with exact Gaussian integrals: boundaries are midpoints of
adjacent levels, each level is the conditional mean E[Z | Z in its cell] =
(pdf(a) - pdf(b)) / (cdf(b) - cdf(a)). Iterated from a uniform start until no
level moves by more than 1e-13. Only the standard library is needed.

The sign mask is ``np.random.default_rng(1974).integers(0, 2, 32)`` read as bits
(bit i set = flip coordinate i). ``tests/codecs/test_turbo_constants.py`` runs
this file's functions and checks them against the constants in the codec.

Usage: .venv/bin/python benchmarks/lloyd_max_codebooks.py
"""

from __future__ import annotations

import math

SIGN_SEED = 1974


def _pdf(x: float) -> float:
    return 0.0 if math.isinf(x) else math.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def lloyd_max_gaussian(bits: int, tol: float = 1e-13, max_iter: int = 100_000) -> list[float]:
    """The 2**bits minimum-MSE reconstruction levels for N(0, 1), ascending."""
    n = 1 << bits
    levels = [2.0 * (-1 + (2 * i + 1) / n) for i in range(n)]
    for _ in range(max_iter):
        edges = [-math.inf] + [(levels[i] + levels[i + 1]) / 2 for i in range(n - 1)] + [math.inf]
        new = [(_pdf(edges[i]) - _pdf(edges[i + 1])) / (_cdf(edges[i + 1]) - _cdf(edges[i]))
               for i in range(n)]
        moved = max(abs(a - b) for a, b in zip(levels, new, strict=True))
        levels = new
        if moved < tol:
            return levels
    raise RuntimeError(f"Lloyd-Max did not converge for {bits} bits")


def gaussian_mse(levels: list[float]) -> float:
    """Expected squared error of nearest-level quantization of N(0, 1) with these levels."""
    n = len(levels)
    edges = [-math.inf] + [(levels[i] + levels[i + 1]) / 2 for i in range(n - 1)] + [math.inf]
    total = 0.0
    for c, a, b in zip(levels, edges[:-1], edges[1:], strict=True):
        # E[(Z - c)^2; a < Z < b] = [(1 + c^2) Phi - ... ] via closed form moments
        pa, pb = _pdf(a), _pdf(b)
        ap = 0.0 if math.isinf(a) else a * pa
        bp = 0.0 if math.isinf(b) else b * pb
        mass = _cdf(b) - _cdf(a)
        first = pa - pb               # E[Z; a<Z<b]
        second = mass + ap - bp       # E[Z^2; a<Z<b]
        total += second - 2 * c * first + c * c * mass
    return total


def sign_mask(seed: int = SIGN_SEED) -> int:
    """The 32-bit sign-flip mask: bit i set means coordinate i is negated."""
    import numpy as np

    bits = np.random.default_rng(seed).integers(0, 2, 32)
    return sum(int(b) << i for i, b in enumerate(bits))


def main() -> None:
    print(f"SIGN_MASK = {sign_mask():#010x}  # np.random.default_rng({SIGN_SEED}).integers(0, 2, 32)")
    for bits in (2, 3, 4):
        levels = lloyd_max_gaussian(bits)
        positive = ", ".join(f"{v:.9f}" for v in levels[len(levels) // 2:])
        print(f"{bits} bits: +/-({positive})   MSE {gaussian_mse(levels):.6f}")


if __name__ == "__main__":
    main()
