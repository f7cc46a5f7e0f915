"""Ranking: a pure function of the results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from tuner.results import Result


@dataclass(frozen=True)
class Ranking:
    baseline: Optional[Result]
    ranked: tuple[Result, ...]  # successful candidates, fastest first
    failed: tuple[Result, ...]

    @property
    def best(self) -> Optional[Result]:
        return self.ranked[0] if self.ranked else None

    def speedup(self, result: Result) -> Optional[float]:
        """Baseline median over this candidate's median (>1 is faster than the default)."""
        if not (self.baseline and self.baseline.ok and result.ok and result.median_ms):
            return None
        return self.baseline.median_ms / result.median_ms  # type: ignore[operator]


    def within_noise_of_best(self) -> tuple[Result, ...]:
        """Other candidates whose median lies within the best's interquartile spread: the data
        cannot tell them apart from the winner."""
        best = self.best
        if best is None or best.median_ms is None:
            return ()
        margin = best.median_ms * (best.spread_pct or 0.0) / 100.0
        return tuple(r for r in self.ranked[1:] if r.median_ms is not None and r.median_ms - best.median_ms <= margin)


def rank(results: Iterable[Result]) -> Ranking:
    """Order the candidates that compiled, ran and matched the baseline's numerics by median time."""
    results = list(results)
    baseline = next((r for r in results if r.is_baseline), None)
    ok = sorted((r for r in results if r.ok and r.median_ms is not None), key=lambda r: (r.median_ms, r.candidate_id))
    failed = tuple(r for r in results if not r.ok)
    return Ranking(baseline, tuple(ok), failed)
