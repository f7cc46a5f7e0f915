"""The space a search moves in: every valid config of a dispatch's problem (or a recorded
sample of it), each with its features and which of the pipeline's preferences it meets.

Plain data (numpy arrays and knob dicts), so the same searches run over a live dispatch and over
a recorded fixture (tuner.search.replay) without the compiler."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np

Value = Union[int, bool]
# A live space larger than this is sampled uniformly (seeded) before a search ranks it: the
# surrogate scores every point each round.
MAX_POINTS = 20000


def point_key(knobs: Mapping[str, Value]) -> str:
    """A stable identity of a knob assignment (the same config, whatever the dict's order)."""
    return json.dumps({k: (bool(v) if isinstance(v, bool) else int(v)) for k, v in sorted(knobs.items())},
                      separators=(",", ":"))


@dataclass(frozen=True)
class SearchSpace:
    """Valid configs (`points`), their feature matrix, and per point which preferences hold
    (`tiers[i, j]`: point i meets preference j, most important first)."""

    points: tuple[dict[str, Value], ...]
    feature_names: tuple[str, ...]
    features: np.ndarray  # (len(points), len(feature_names)), float
    preference_names: tuple[str, ...]
    tiers: np.ndarray  # (len(points), len(preference_names)), bool
    diversity: tuple[str, ...] = ()  # knobs the preference order cycles through within a tier
    complete: bool = True  # the whole valid space (False: a sample of it)
    size: int = 0  # the whole valid space's size, when known

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {point_key(p): i for i, p in enumerate(self.points)})

    def __len__(self) -> int:
        return len(self.points)

    def named(self, i: int) -> tuple[dict[str, float], dict[str, bool]]:
        """Point i's features and preferences by name (as the store keeps them)."""
        return (dict(zip(self.feature_names, map(float, self.features[i]))),
                dict(zip(self.preference_names, map(bool, self.tiers[i]))))

    def index(self, knobs: Mapping[str, Value]) -> Optional[int]:
        """The point with these knob values, or None when it is not in the space."""
        return self._index.get(point_key(knobs))  # type: ignore[attr-defined]

    @classmethod
    def of(cls, points: Sequence[Mapping[str, Value]], features: Callable[[Mapping[str, Value]], Mapping[str, float]],
           preferences: Sequence[tuple[str, Callable[[Mapping[str, Value]], bool]]] = (),
           diversity: Sequence[str] = (), complete: bool = True, size: int = 0) -> "SearchSpace":
        """A space from its points, a feature function and named preference checks."""
        pts = tuple(dict(p) for p in points)
        rows = [dict(features(p)) for p in pts]
        names = tuple(sorted({n for r in rows for n in r}))
        matrix = np.array([[float(r.get(n, 0.0)) for n in names] for r in rows], dtype=float).reshape(len(pts), len(names))
        tiers = np.array([[bool(check(p)) for _, check in preferences] for p in pts], dtype=bool).reshape(
            len(pts), len(preferences))
        return cls(pts, names, matrix, tuple(n for n, _ in preferences), tiers, tuple(diversity), complete,
                   size or len(pts))


def knob_features(knobs: Mapping[str, Value]) -> dict[str, float]:
    """Features any config has: each knob's value (log2 for positive integers, where tile sizes
    act multiplicatively) and the log2 product of each pair of integer knobs (tiles multiply
    into workgroup tiles, register tiles and footprints)."""
    out: dict[str, float] = {}
    logs: dict[str, float] = {}
    for name, v in sorted(knobs.items()):
        if isinstance(v, bool):
            out[name] = float(v)
        else:
            out[name] = math.log2(v) if v > 0 else -1.0
            if v > 0:
                logs[name] = math.log2(v)
    names = sorted(logs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            out[f"{a}*{b}"] = logs[a] + logs[b]
    return out
