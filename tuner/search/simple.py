"""Searches with a fixed order: the whole space in its enumeration order (`exhaustive`), a
uniform random order (`random`), and the pipeline's preference tiers (`preference`, the order
`tune` used before searches existed)."""

from __future__ import annotations

import numpy as np

from tuner.search.base import Search


class Exhaustive(Search):
    """Every point, in the space's order (the knobs' domain order)."""

    name = "exhaustive"
    takes_seeds = False

    def _order(self, n: int) -> list[int]:
        return self.unvisited()[:n]


class RandomSearch(Search):
    """Points uniformly at random without repeats, seeded."""

    name = "random"
    takes_seeds = False

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
    the least-used values of the diversity knobs, in their order, as far as the tier allows (as
    the solver enumeration steers). Deterministic: the seed does not change it."""

    name = "preference"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        space = self.space
        # Tier of each point: (not pref0, not pref1, ...) sorts all-met first.
        keys = [tuple(not bool(x) for x in space.tiers[i]) for i in range(len(space))]
        self._tiers = [np.array([i for i in range(len(space)) if keys[i] == key], dtype=int)
                       for key in sorted(set(keys))]
        # Each diversity knob's values as small codes, and how often each was taken, per tier.
        self._codes = []
        for name in space.diversity:
            values = {v: c for c, v in enumerate(dict.fromkeys(p[name] for p in space.points))}
            self._codes.append(np.array([values[p[name]] for p in space.points], dtype=int))
        self._counts = [[np.zeros(int(c.max()) + 1 if len(c) else 1, dtype=int) for c in self._codes]
                        for _ in self._tiers]

    def _order(self, n: int) -> list[int]:
        taken = np.zeros(len(self.space), dtype=bool)
        taken[list(self.proposed)] = True
        out: list[int] = []
        while len(out) < n:
            t = None
            for i, tier in enumerate(self._tiers):
                self._tiers[i] = tier = tier[~taken[tier]]
                if tier.size:
                    t = i
                    break
            if t is None:
                break
            candidates = self._tiers[t]
            for codes, counts in zip(self._codes, self._counts[t]):
                used = counts[codes[candidates]]
                candidates = candidates[used == used.min()]
            best = int(candidates.min())
            for codes, counts in zip(self._codes, self._counts[t]):
                counts[codes[best]] += 1
            taken[best] = True
            out.append(best)
        return out
