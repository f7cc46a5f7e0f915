"""The order in which a kernel's tile space is tried: by an estimate, spread over tile shapes."""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def ranked(tiles: Sequence[T], estimate: Callable[[T], float]) -> tuple[T, ...]:
    """`tiles` (each with .bm, .bn and .label) by `estimate` (smallest first), taken round-robin
    over their shapes (bm x bn) in the order of each shape's best: the best of every shape, then
    every shape's second, and so on, so that a few measurements meet several shapes."""
    by_shape: dict[tuple[int, int], list[T]] = {}
    for t in sorted(tiles, key=lambda t: (estimate(t), t.label)):
        by_shape.setdefault((t.bm, t.bn), []).append(t)
    order: list[T] = []
    for i in range(max((len(v) for v in by_shape.values()), default=0)):
        order += [v[i] for v in by_shape.values() if i < len(v)]
    return tuple(order)
