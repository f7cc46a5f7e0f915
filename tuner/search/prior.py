"""Learning across runs: measurements of other dispatches (of the same pipeline, on the same
device, timed the same way) that a model search also learns from (`--warm-start`). They come
from the result store (live) or from recorded spaces (replay); each point is its features by
name, so a dispatch whose space has other features still lines up by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from tuner.search.space import SearchSpace

# A model search starts from a prior only when it has this many points: fewer say little.
MIN_PRIOR_POINTS = 16


@dataclass(frozen=True)
class PriorPoint:
    """One measured config of another dispatch: its features and preferences by name, and its
    speedup over that dispatch's default."""

    features: Mapping[str, float]
    tiers: Mapping[str, bool]
    speedup: float
    dispatch: str


@dataclass(frozen=True)
class Prior:
    points: tuple[PriorPoint, ...]

    def __len__(self) -> int:
        return len(self.points)

    @property
    def dispatches(self) -> tuple[str, ...]:
        return tuple(sorted({p.dispatch for p in self.points}))

    def matrix(self, space: SearchSpace) -> tuple[np.ndarray, np.ndarray]:
        """The points as rows of `space`'s features then its preferences (by name; a feature or
        preference the point lacks is 0), and their log speedups."""
        x = np.array([[float(p.features.get(n, 0.0)) for n in space.feature_names]
                      + [float(bool(p.tiers.get(n, False))) for n in space.preference_names] for p in self.points],
                     dtype=float).reshape(len(self.points), len(space.feature_names) + len(space.preference_names))
        y = np.log(np.array([p.speedup for p in self.points], dtype=float))
        return x, y

    def summary(self) -> dict:
        return {"points": len(self.points), "dispatches": list(self.dispatches)}


def prior_of_spaces(spaces: Sequence[tuple[str, SearchSpace, Sequence[float | None]]]) -> Prior:
    """A prior from recorded spaces: (name, space, score per point); failures are left out."""
    return Prior(tuple(PriorPoint(*space.named(i), float(score), name) for name, space, scores in spaces
                       for i, score in enumerate(scores) if score is not None and score > 0))
