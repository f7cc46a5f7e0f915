"""Replaying searches against recorded spaces: every point of a space (or a uniform sample of
it) measured once (benchmarks/record_space.py), kept as a fixture; a search runs against the
recording as if it were the device, with no compiling or timing, and the question is how many
evaluations it needs to come within a few percent of the best recorded point."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from tuner.search import Budget, Outcome, Step, make_search, run_search
from tuner.search.heuristics import SeedContext, collect_seeds
from tuner.search.prior import Prior, prior_of_spaces
from tuner.search.space import SearchSpace


@dataclass(frozen=True)
class Recording:
    """A recorded space: the points with their measured scores, and how they were taken."""

    meta: dict
    space: SearchSpace
    scores: tuple[Optional[float], ...]
    statuses: tuple[str, ...]

    @property
    def best(self) -> float:
        return max(s for s in self.scores if s is not None)

    @property
    def name(self) -> str:
        return f"{self.meta.get('shape') or self.meta.get('dispatch')} ({self.meta.get('target')})"

    def seed_context(self) -> SeedContext:
        m = self.meta
        backend, _, arch = m.get("target", "").partition(":")
        return SeedContext(m.get("pipeline", ""), backend, arch, m.get("kind", ""), m.get("shape", ""), self.space)


def load_recording(path: Path) -> Recording:
    """A fixture written by `benchmarks/record_space.py fixture`."""
    data = json.loads(Path(path).read_text())
    points = data["points"]
    names = tuple(data["feature_names"])
    features = np.array([p["features"] for p in points], dtype=float).reshape(len(points), len(names))
    prefs = tuple(data.get("preference_names", ()))
    tiers = np.array([p.get("tiers", []) for p in points], dtype=bool).reshape(len(points), len(prefs))
    space = SearchSpace(tuple(p["knobs"] for p in points), names, features, prefs, tiers,
                        tuple(data.get("diversity", ())), complete=data.get("space_size") == len(points),
                        size=data.get("space_size", len(points)))
    meta = {k: v for k, v in data.items() if k != "points"}
    return Recording(meta, space, tuple(p["speedup"] for p in points), tuple(p["status"] for p in points))


def prior_for(recording: Recording, others: Sequence[Recording]) -> Prior:
    """What a model search on `recording` may start from: the other recordings of the same
    pipeline on the same device (as live, where the store holds other dispatches' results)."""
    same = [r for r in others if r.meta.get("shape") != recording.meta.get("shape")
            and r.meta.get("pipeline") == recording.meta.get("pipeline")
            and r.meta.get("device_id") == recording.meta.get("device_id")]
    return prior_of_spaces([(r.name, r.space, r.scores) for r in same])


def replay(recording: Recording, search: str, seed: int, budget: Budget, batch_size: int = 8,
           with_seeds: bool = True, stop_at: Optional[float] = None, prior: Optional[Prior] = None) -> list[Step]:
    """Run `search` against the recording: each point's outcome is its recorded score. Seeds are
    the heuristics' as live, less the JSON entries found on this very shape. `stop_at`: stop once
    a score reaches it. `prior`: other dispatches' measurements a model search starts from."""
    seeds = collect_seeds(recording.seed_context(), exclude_found_on=recording.meta.get("shape")) if with_seeds else []
    s = make_search(search, recording.space, seed=seed, seeds=seeds)
    if prior is not None:
        s.warm_start(prior)

    def evaluate(batch) -> list[Outcome]:
        return [Outcome(recording.scores[p.index], recording.statuses[p.index]) for p in batch]

    return run_search(s, evaluate, budget, batch_size, stop_at=stop_at)
