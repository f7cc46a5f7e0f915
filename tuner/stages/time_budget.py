"""tune-model's time budget for the whole run (`--time-budget`, ModelOptions.time_budget_s): how
its seconds are spread over the stages, and what was left undone for lack of them.

The flag stage may take up to FLAG_SHARE of the budget: past it, no further choice is built, no
dispatch a choice forms is tuned before the choice is judged (it is judged with the compiler's
config there), and no further step is judged (the best choice so far stands). The dispatch stage takes what is left
then, less MERGE_SHARE of the budget kept for the merge; within it each dispatch's search gets the
time left in proportion to its share of the model's time (tuner.stages.builtin.search_seconds), so
the seconds go where the gain is. The merge always runs (it validates the result on the whole
model) and may overrun; the verdict says what was not done."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

# The flag stage's most, and what is kept for the merge, as shares of the whole budget. On the
# H200 (docs/benchmarks/real-exports.md) the flag stage took 300-430 s of 600-1100 s runs and made
# most of the gain on transformer exports; a merge of 4 dispatches took 60-170 s.
FLAG_SHARE = 0.4
MERGE_SHARE = 0.15
# A choice's figure where the flag stage's share of the budget ran out before it was built.
NOT_TRIED = "not tried: the flag stage's share of the time budget was spent"


@dataclass
class TimeBudget:
    """`seconds` for the whole run from `start` (on `clock`), and what was not done (`undone`)."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    start: float = field(default=-1.0)
    undone: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.start < 0:
            self.start = self.clock()

    def flag_stage_left(self) -> float:
        """Seconds the flag stage may still take."""
        return self.start + FLAG_SHARE * self.seconds - self.clock()

    def dispatch_stage_seconds(self) -> float:
        """Seconds the dispatch stage may take from now: the budget left, less the merge's share."""
        return max(0.0, self.start + (1.0 - MERGE_SHARE) * self.seconds - self.clock())

    def spent(self) -> float:
        return self.clock() - self.start

    def skip(self, what: str) -> None:
        """Say that `what` was not done for lack of time (once)."""
        if what not in self.undone:
            self.undone.append(what)

    def verdict_text(self) -> str:
        """The verdict's words on the budget: what was not done, or "" where all was."""
        if not self.undone:
            return ""
        return (f"; within the time budget of {self.seconds:.0f} s ({self.spent():.0f} s spent) not done: "
                + "; ".join(self.undone))


def flag_share_spent(budget: Optional[TimeBudget]) -> bool:
    """Whether the flag stage's share of the run's budget is spent (never, without a budget)."""
    return budget is not None and budget.flag_stage_left() <= 0
