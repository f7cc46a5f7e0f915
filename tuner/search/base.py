"""The base every search is built on: propose a batch of points of the space, be told how each
did, propose more. A search never compiles or times anything (the loop hands its batches to an
evaluator, or to a recording), so the same search runs live and in replay.

Seeds (from tuner.search.heuristics, or the user) go first, in the order given; a seed that is
not in the space (invalid for this dispatch) is dropped and said so in `dropped_seeds`."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from tuner.search.space import SearchSpace, Value

if TYPE_CHECKING:
    from tuner.search.prior import Prior


@dataclass(frozen=True)
class Seed:
    """A config to try first, and who proposed it (a heuristic's name, "user", "store")."""

    knobs: Mapping[str, Value]
    source: str


@dataclass(frozen=True)
class Proposal:
    """One point to evaluate: its index in the space and what proposed it."""

    index: int
    source: str


class Search:
    """Proposes points it has not proposed before; `observe` tells it a point's score (a speedup
    over the baseline, higher is better; None for a failure). Subclasses choose the order
    (`_order`) and may learn from `scores`."""

    name = ""
    takes_seeds = True  # False for the plain orders (exhaustive, random): baselines for the others
    adaptive = False  # whether what it proposes depends on what it was told (else one batch will do)

    def __init__(self, space: SearchSpace, seed: int = 0, seeds: Sequence[Seed] = ()) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.seed = seed
        self.proposed: set[int] = set()
        self.scores: dict[int, Optional[float]] = {}
        self._seeds: list[Proposal] = []
        self.dropped_seeds: list[Seed] = []
        for s in seeds if self.takes_seeds else ():
            i = space.index(s.knobs)
            if i is None:
                self.dropped_seeds.append(s)
            elif all(p.index != i for p in self._seeds):
                self._seeds.append(Proposal(i, s.source))

    @property
    def exhausted(self) -> bool:
        return len(self.proposed) >= len(self.space)

    def propose(self, n: int) -> list[Proposal]:
        """Up to `n` points never proposed before: seeds first, then the search's own choice."""
        out: list[Proposal] = []
        while self._seeds and len(out) < n:
            p = self._seeds.pop(0)
            if p.index not in self.proposed:
                out.append(p)
                self.proposed.add(p.index)
        if len(out) < n and not self.exhausted:
            for i in self._order(n - len(out)):
                if i in self.proposed:
                    raise AssertionError(f"{self.name} proposed point {i} twice")  # a bug in the search, not input
                out.append(Proposal(i, self.name))
                self.proposed.add(i)
        return out

    def observe(self, index: int, score: Optional[float]) -> None:
        self.scores[index] = score

    def unvisited(self) -> list[int]:
        return [i for i in range(len(self.space)) if i not in self.proposed]

    def warm_start(self, prior: "Prior") -> bool:
        """Start from measurements of other dispatches (tuner.search.prior), where the search
        learns; True if it did. A search that does not learn ignores them."""
        return False

    def _order(self, n: int) -> list[int]:
        """The search's next `n` (or fewer, when the space runs out) unproposed points."""
        raise NotImplementedError
