"""Tiling building blocks: divisors, tiles that divide a dimension, register and memory budgets."""

from __future__ import annotations

import z3


def divisors(n: int) -> list[int]:
    """All positive divisors of n, ascending."""
    if n <= 0:
        raise ValueError(f"divisors of non-positive {n}")
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def powers_of_two(lo: int, hi: int) -> list[int]:
    """Powers of two in [lo, hi], ascending."""
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


def tile_candidates(dim: int, lo: int = 1, hi: int | None = None, multiple_of: int = 1) -> list[int]:
    """Tile sizes worth trying for a loop of extent `dim`: its divisors in [lo, hi] and the powers
    of two in range (the latter leave a partial last tile on unaligned shapes), keeping only
    multiples of `multiple_of`. Never empty: falls back to the whole extent."""
    hi = dim if hi is None else min(hi, dim)
    tiles = {d for d in divisors(dim) if lo <= d <= hi} | set(powers_of_two(lo, hi))
    return sorted(t for t in tiles if t % multiple_of == 0) or [dim]


def divides(tile: z3.ArithRef, extent: z3.ArithRef | int) -> z3.BoolRef:
    """`tile` divides `extent` (tile > 0)."""
    return z3.And(tile > 0, extent % tile == 0)


def ceil_div(a: z3.ArithRef | int, b: z3.ArithRef | int) -> z3.ArithRef:
    return (a + b - 1) / b  # integer division in Z3 for Int sorts


def within(value: z3.ArithRef, budget: int) -> z3.BoolRef:
    """A resource use stays within its budget (registers, bytes of memory, threads)."""
    return value <= budget

