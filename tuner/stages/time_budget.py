"""tune-model's time budget for the whole run (`--time-budget`, ModelOptions.time_budget_s): how
its seconds are spread over the stages, and what was left undone for lack of them.

The flag stage may take up to FLAG_SHARE of the budget left when it starts (the import, the
profile and the default's build come before it: 100 s of Swin-T's 420 on the H200, which left
its flag stage 68 s): past it, no further choice is built, no dispatch a choice forms is tuned
before the choice is judged (it is judged with the compiler's config there; a choice already
built is still timed), and no further step is judged (the best choice so far stands). The dispatch stage takes what is left
then, less MERGE_SHARE of the budget kept for the merge, and at least DISPATCH_FLOOR of it where a
dispatch of FLOOR_WORTH of the model's time is left to tune; within it each dispatch's search gets the
time left in proportion to its share of the model's time (tuner.stages.builtin.search_seconds), so
the seconds go where the gain is. The merge always runs (it validates the result on the whole
model) and may overrun; the verdict says what was not done.

A run stopped before it finished (a machine's time limit, say) and resumed in the same directory
goes on with what is left of the same budget, not a new one: the seconds spent are written to
DIR/time-budget.json whenever the budget is consulted (RECORD) and counted by the resumed run
(Swin-T on the H200, stopped once, took 1,000 s of tune-model under a 420 s budget before)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from tuner.run_dir import write_file

# The flag stage's most, as a share of the budget left when it starts, and what is kept for the
# merge, as a share of the whole budget. On the
# H200 (docs/benchmarks/real-exports.md) the flag stage took 300-430 s of 600-1100 s runs and made
# most of the gain on transformer exports; a merge of 4 dispatches took 60-170 s.
FLAG_SHARE = 0.4
MERGE_SHARE = 0.15
# The dispatch stage's least, as a share of the whole budget, however late it starts: Swin-T's
# flag stage on the H200 ran 130 s past its share, left the dispatch stage nothing, and the run
# kept 2.46x where one that tuned four matmuls had 2.76x. The run may then overrun its budget by
# as much; the verdict says so.
DISPATCH_FLOOR = 0.1
# The least share of the model's time a dispatch must have for the floor to be given where the
# dispatch stage's share is spent: one of less, tuned to twice its speed, makes the model under
# 2.5% faster, inside what a claim can tell apart (Falcon-7B's layer on the H200 overran its budget
# by 41 s, the floor and the merge's check, for two elementwise dispatches of 1-2%: 1.01x).
FLOOR_WORTH = 0.05
# A choice's figure where the flag stage's share of the budget ran out before it was built.
NOT_TRIED = "not tried: the flag stage's share of the time budget was spent"
RECORD = "time-budget.json"  # DIR/: the seconds spent so far, while the run is not finished


@dataclass
class TimeBudget:
    """`seconds` for the whole run from `start` (on `clock`), and what was not done (`undone`).
    `record`: where the seconds spent are kept for a resumed run (RECORD in the run's directory;
    None: nowhere), and `earlier` what a stopped run there had spent (read from it)."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    start: float = field(default=-1.0)
    undone: list[str] = field(default_factory=list)
    record: Optional[Path] = None
    earlier: float = 0.0
    # Seconds into the run the flag stage started at (begin_flag_stage), kept for a resumed run.
    flags_from: Optional[float] = None
    # The flag stage's steps so far in this run: their seconds and how many choices they judged.
    flag_step_seconds: float = 0.0
    flag_step_choices: int = 0

    def __post_init__(self) -> None:
        if self.start < 0:
            self.start = self.clock()
        if self.record is not None and self.record.is_file():
            try:
                data = json.loads(self.record.read_text())
                self.earlier = max(0.0, float(data["spent"]))
                self.flags_from = None if data.get("flags_from") is None else float(data["flags_from"])
            except (ValueError, KeyError, TypeError, OSError, AttributeError):
                self.earlier, self.flags_from = 0.0, None  # unreadable: this run's budget starts whole
        self.start -= self.earlier

    def begin_flag_stage(self) -> None:
        """The flag stage starts now (once: a resumed run's flag stage goes on with its share)."""
        if self.flags_from is None:
            self.flags_from = self.spent()
        self._keep()

    def flag_stage_left(self) -> float:
        """Seconds the flag stage may still take: FLAG_SHARE of what was left when it began."""
        self._keep()
        began = self.spent() if self.flags_from is None else self.flags_from
        return began + FLAG_SHARE * (self.seconds - began) - self.spent()

    def note_flag_step(self, seconds: float, choices: int) -> None:
        """A step of the flag stage took `seconds` to build, check and time `choices` choices."""
        self.flag_step_seconds += seconds
        self.flag_step_choices += choices

    def flag_step_room(self) -> Optional[int]:
        """How many choices a step may take and still end within the flag stage's share, at the
        pace of its steps so far (None: any number, no step having set a pace while the share lasts)."""
        left = self.flag_stage_left()
        if self.flag_step_choices == 0:
            return None if left > 0 else 0
        return max(0, int(left // (self.flag_step_seconds / self.flag_step_choices)))

    def before_merge_left(self) -> float:
        """Seconds left before the merge's share (0 or less: spent; no floor)."""
        self._keep()
        return self.start + (1.0 - MERGE_SHARE) * self.seconds - self.clock()

    def dispatch_stage_seconds(self, largest_share: Optional[float] = None) -> float:
        """Seconds the dispatch stage may take from now: the budget left, less the merge's share,
        and no less than DISPATCH_FLOOR of the budget (said in the verdict where it overruns),
        unless `largest_share`, the largest share of the model's time among the dispatches it
        would tune (None: not known), is under FLOOR_WORTH: then only what is left."""
        left = self.before_merge_left()
        floor = DISPATCH_FLOOR * self.seconds
        if left >= floor:
            return left
        if largest_share is not None and largest_share < FLOOR_WORTH:
            self.skip(f"keeping to the budget: the dispatch stage began with {max(0.0, left):.0f} s left of its "
                      f"share, its largest dispatch {100 * largest_share:.1f}% of the model's time (under "
                      f"{100 * FLOOR_WORTH:.0f}%: not worth overrunning the budget for)")
            return max(left, 0.0)
        self.skip(f"keeping to the budget: the dispatch stage began with {max(0.0, left):.0f} s left "
                  f"of its share, and was given {floor:.0f} s")
        return floor

    def spent(self) -> float:
        return self.clock() - self.start

    def skip(self, what: str) -> None:
        """Say that `what` was not done for lack of time (once)."""
        self._keep()
        if what not in self.undone:
            self.undone.append(what)

    def _keep(self) -> None:
        """The seconds spent so far, written where a resumed run reads them."""
        if self.record is not None:
            write_file(self.record, json.dumps({"seconds": self.seconds, "spent": round(self.spent(), 1),
                                                "flags_from": self.flags_from}))

    def finish(self) -> None:
        """The run is done: a later run in the directory has a budget of its own."""
        if self.record is not None:
            self.record.unlink(missing_ok=True)

    def verdict_text(self) -> str:
        """The verdict's words on the budget: what was not done, or "" where all was."""
        if not self.undone:
            return ""
        resumed = f", {self.earlier:.0f} s of them by the run this one resumed" if self.earlier else ""
        return (f"; within the time budget of {self.seconds:.0f} s ({self.spent():.0f} s spent{resumed}) not done: "
                + "; ".join(self.undone))


def flag_step_room(budget: Optional[TimeBudget]) -> Optional[int]:
    """How many choices a flag-stage step may take (None: any number; always, without a budget)."""
    return None if budget is None else budget.flag_step_room()


def flag_share_spent(budget: Optional[TimeBudget]) -> bool:
    """Whether the flag stage's share of the run's budget is spent (never, without a budget)."""
    return budget is not None and budget.flag_stage_left() <= 0


def eta(spent: Sequence[float], left: int, limit_s: Optional[float] = None) -> str:
    """The stage's time left, said after a dispatch: the dispatches left at the pace of those
    tuned so far (their mean), no more than the stage's own limit where it has one; "" when none
    is left."""
    if left <= 0 or not spent:
        return ""
    guess = left * sum(spent) / len(spent)
    if limit_s is not None:
        guess = min(guess, max(0.0, limit_s))
    return f"; about {guess:.0f} s left for the {left} dispatch{'es' if left > 1 else ''} to go"


def search_seconds(left_s: float, shares: Sequence[Optional[float]]) -> float:
    """The first of the dispatches left's time: `left_s` in proportion to its share among theirs
    (equal parts where the shares are unknown); 0 or less once nothing is left."""
    if left_s <= 0:
        return 0.0
    known = [s or 0.0 for s in shares]
    total = sum(known)
    return left_s * (known[0] / total if total > 0 else 1.0 / len(known))
