"""Searches with a fixed order: the whole space in its enumeration order (`exhaustive`), a
uniform random order (`random`), and the pipeline's preference tiers (`preference`, the order
`tune` used before searches existed)."""

from __future__ import annotations

from collections import Counter

from tuner.search.base import Search


class Exhaustive(Search):
    """Every point, in the space's order (the knobs' domain order)."""

    name = "exhaustive"

    def _order(self, n: int) -> list[int]:
        return self.unvisited()[:n]


class RandomSearch(Search):
    """Points uniformly at random without repeats, seeded."""

    name = "random"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._perm = list(range(len(self.space)))
        self.rng.shuffle(self._perm)

    def _order(self, n: int) -> list[int]:
        out = []
        while self._perm and len(out) < n:
            i = self._perm.pop()
            if i not in self.proposed:
                out.append(i)
        return out


class PreferenceSearch(Search):
    """The pipeline's preference tiers: points meeting every preference first, a more important
    preference outweighing all less important ones together; within a tier, each next point takes
    the least-used values of the diversity knobs, in their order (as the solver enumeration
    steers). Deterministic: the seed does not change it."""

    name = "preference"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        tiers = self.space.tiers
        # Lexicographic: (not pref0, not pref1, ...) sorts all-met first.
        self._rank = [tuple(not bool(x) for x in tiers[i]) for i in range(len(self.space))]
        self._counts: dict[tuple, dict[str, Counter]] = {}

    def _order(self, n: int) -> list[int]:
        out: list[int] = []
        for _ in range(n):
            left = [i for i in self.unvisited() if i not in out]
            if not left:
                break
            tier = min(self._rank[i] for i in left)
            in_tier = [i for i in left if self._rank[i] == tier]
            counts = self._counts.setdefault(tier, {name: Counter() for name in self.space.diversity})
            points = self.space.points
            best = min(in_tier, key=lambda i: (tuple(counts[k][points[i][k]] for k in self.space.diversity), i))
            for k in self.space.diversity:
                counts[k][points[best][k]] += 1
            out.append(best)
        return out
