"""The search loop: a search proposes a batch, an injected evaluation scores it, the search
sees the scores, until the budget is spent or the space is. The evaluation is anything that
scores a batch (the compile-and-time evaluators live; a recording in replay), so the loop never
knows how configs are run.

Budget: `evaluations` counts every point handed to the evaluation, failed and duplicate ones
included (confirmation re-timings are the evaluator's, not the search's); `seconds` stops the
loop before a batch would start past it (a batch is not cut in the middle)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from tuner.search.base import Proposal, Search


@dataclass(frozen=True)
class Budget:
    evaluations: int
    seconds: Optional[float] = None


@dataclass(frozen=True)
class Outcome:
    """What the evaluation says of one point: its score (a speedup; None for a failure) and why."""

    score: Optional[float]
    status: str = "ok"


@dataclass(frozen=True)
class Step:
    """One evaluation, in the order it happened."""

    index: int
    source: str  # what proposed it: a heuristic's name or the search's
    score: Optional[float]
    status: str
    batch: int


Evaluate = Callable[[Sequence[Proposal]], Sequence[Outcome]]


def run_search(search: Search, evaluate: Evaluate, budget: Budget, batch_size: int = 8,
               clock: Callable[[], float] = time.monotonic,
               on_batch: Optional[Callable[[list[Step]], None]] = None,
               stop_at: Optional[float] = None) -> list[Step]:
    """Run `search` against `evaluate` within `budget`; every evaluation, in order. `stop_at`:
    stop after the batch in which a score reached it (a replay asking how long a search takes
    to get somewhere need not spend the whole space)."""
    if budget.evaluations < 1:
        raise ValueError("a search budget needs at least one evaluation")
    start = clock()
    steps: list[Step] = []
    batch_no = 0
    while len(steps) < budget.evaluations and not search.exhausted:
        if budget.seconds is not None and clock() - start >= budget.seconds:
            break
        batch = search.propose(min(batch_size, budget.evaluations - len(steps)))
        if not batch:
            break
        outcomes = list(evaluate(batch))
        if len(outcomes) != len(batch):
            raise ValueError(f"the evaluation returned {len(outcomes)} outcomes for {len(batch)} points")
        new = []
        for p, o in zip(batch, outcomes):
            search.observe(p.index, o.score)
            new.append(Step(p.index, p.source, o.score, o.status, batch_no))
        steps.extend(new)
        batch_no += 1
        if on_batch:
            on_batch(new)
        if stop_at is not None and any(s.score is not None and s.score >= stop_at for s in new):
            break
    return steps


def evaluations_to_reach(steps: Sequence[Step], target: float) -> Optional[int]:
    """How many evaluations it took until one scored at least `target` (None: never)."""
    for n, s in enumerate(steps, 1):
        if s.score is not None and s.score >= target:
            return n
    return None
