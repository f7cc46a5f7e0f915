"""Comparisons made under the same conditions: paired per-round ratios to the baseline, the rule
that names a winner, the baseline's drift over a pass, and the baseline timing nearest a
candidate's. Pure functions of timings; nothing here runs a tool.

A speedup is never a ratio of two medians taken at different times: on a shared machine the
load changes in the middle of a run, and a figure taken before the change compared with one
taken after it says more about the load than about the configs."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

# The share of rounds in which a winner must beat the baseline: a candidate is faster beyond the
# noise when its paired ratio is above 1.0 in at least this share of the rounds (three of four).
WIN_SHARE = 0.75
# Two timings of the baseline on one device that differ by more than their own spread (the sum
# of their interquartile spreads), and by at least this much, mean the machine changed between
# them: candidates timed in between are timed again. On the quiet 2-core machine here, timings
# of the same module in consecutive calls differed by up to 8% (a call's own spread is smaller).
DRIFT_FLOOR = 0.10


# The coverage a claim's interval aims for (Paired.interval).
INTERVAL_LEVEL = 0.9


@dataclass(frozen=True)
class Paired:
    """A candidate against the baseline over interleaved rounds: in round i both were timed
    within one round-robin, and `ratios[i]` is baseline / candidate (>1: the candidate is faster)."""

    ratios: tuple[float, ...]

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    @property
    def lower(self) -> float:
        """The ratio that at least WIN_SHARE of the rounds reach or exceed: with four rounds the
        second smallest, so `lower > 1` means faster in at least three rounds of four."""
        ordered = sorted(self.ratios)
        return ordered[len(ordered) - math.ceil(WIN_SHARE * len(ordered))]

    @property
    def beats_baseline(self) -> bool:
        return len(self.ratios) > 0 and self.lower > 1.0

    @property
    def straddles(self) -> bool:
        """Faster than the baseline in some rounds and slower in others."""
        return bool(self.ratios) and min(self.ratios) < 1.0 < max(self.ratios)

    @property
    def holds_one(self) -> bool:
        """Whether the interval of the median (`interval`) holds 1.0: no gain measured, however
        the rounds fell (issue 63: "1.21x (0.98-1.49), faster in 3 of 4")."""
        interval = self.interval()
        return interval is not None and interval.low <= 1.0

    def then(self, later: "Paired") -> "Paired":
        """These rounds followed by `later`'s."""
        return Paired(self.ratios + later.ratios)

    def interval(self, level: float = INTERVAL_LEVEL) -> Optional["Interval"]:
        """A distribution-free interval for the median ratio: the k-th smallest and k-th largest
        ratios, for the largest k whose coverage, 1 - 2 P(Binomial(n, 1/2) < k), is at least
        `level` (the whole range where none is): with 8 rounds the 2nd smallest to the 2nd
        largest, 93%; with 4, the smallest to the largest, 87.5%. None for fewer than 2 rounds."""
        ordered, n = sorted(self.ratios), len(self.ratios)
        if n < 2:
            return None

        def coverage(k: int) -> float:
            return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

        k = 1
        while k + 1 <= n // 2 and coverage(k + 1) >= level:
            k += 1
        return Interval(ordered[k - 1], ordered[n - k], coverage(k), n)


@dataclass(frozen=True)
class Interval:
    """Where the median of paired ratios lies, from `rounds` rounds, with that coverage."""

    low: float
    high: float
    coverage: float
    rounds: int

    def text(self) -> str:
        return f"{self.low:.2f}-{self.high:.2f}, a {100 * self.coverage:.0f}% interval from {self.rounds} rounds"

    def to_json(self) -> dict:
        return {"low": self.low, "high": self.high, "coverage": self.coverage, "rounds": self.rounds}


def leading(rounds: Paired, candidate_id: int) -> tuple[float, int]:
    """The order that picks the lead among candidates faster beyond the noise (max of it): the
    highest lower quantile of the rounds (`Paired.lower`: the ratio WIN_SHARE of them reach), then
    the highest median, then the lowest id. A lower quantile is less swayed than the median by
    one lucky round, the winner's curse of picking the best of several noisy candidates (issue 36).
    The passes time the lead's fresh rounds and the ranking names it by the same order."""
    return (rounds.lower, rounds.speedup, -candidate_id)


def simpler_within_noise(lead, contenders, paired_of) -> tuple[object, str]:
    """The candidate to name in place of `lead` (a result with a config) where a simpler one, a
    flag-only candidate among `contenders` (no config of its own: `compilation_info` empty, its
    flags in `config_flags`), is not beaten by it beyond the noise: the lead faster than it in
    fewer than WIN_SHARE of their common rounds (per round, the lead's ratio over its ratio; the
    rounds interleave all of them, so a change of load moves both). Returns (the one to name,
    why, or "" where the lead stays). A tuned config that is no faster than a flag the user
    would set anyway is not worth its spec (issue 36: data tiling alone against a data-tiled
    config that was not faster)."""
    if not getattr(lead, "compilation_info", ""):
        return lead, ""
    simpler = sorted((r for r in contenders if r is not lead and r.config_flags and not r.compilation_info),
                     key=lambda r: leading(paired_of(r), r.candidate_id), reverse=True)
    for r in simpler:
        mine, theirs = paired_of(lead).ratios, paired_of(r).ratios
        per_round = [a / b for a, b in zip(mine, theirs)]
        if per_round and sum(x > 1.0 for x in per_round) < WIN_SHARE * len(per_round):
            return r, (f"candidate {lead.candidate_id} ({lead.label}) was faster than it in only "
                       f"{sum(x > 1.0 for x in per_round)} of {len(per_round)} rounds, within the noise: "
                       f"the simpler flag alone is kept")
    return lead, ""


# More rounds for a contested winner: at most this many batches of rounds in all (the first
# included), each as long as the first.
MAX_ROUND_BATCHES = 3


def contested(rounds: Paired, first_pass: Optional[float]) -> bool:
    """Whether a candidate the rounds call faster needs more of them: its first pass said it was
    slower beyond the noise (by more than DRIFT_FLOOR), or its rounds straddle 1.0. Either way
    the few rounds may have been lucky (on a quiet machine, a skinny matmul 0.73x in its first
    pass was 1.37x in four rounds and 0.78-0.86x side by side with plain iree-compile)."""
    if not rounds.beats_baseline:
        return False
    slower_first = first_pass is not None and first_pass < 1.0 / (1.0 + DRIFT_FLOOR)
    return slower_first or rounds.straddles


def settled(earlier: Paired, later: Paired) -> bool:
    """Whether more rounds left the verdict where it was: the earlier rounds and all of them
    together agree (faster beyond the noise, or not)."""
    return earlier.beats_baseline == earlier.then(later).beats_baseline


def paired(baseline_rounds: Sequence[Optional[float]], candidate_rounds: Sequence[Optional[float]]) -> Paired:
    """Per-round ratios baseline / candidate; a round where either timing failed is left out."""
    return Paired(tuple(b / c for b, c in zip(baseline_rounds, candidate_rounds) if b and c))


def bracketing(before: Optional[float], after: Optional[float]) -> Optional[float]:
    """The baseline's time at a candidate timed between two baseline timings: their geometric
    mean (a steady change of load cancels out), or the one that exists."""
    if before and after:
        return math.sqrt(before * after)
    return before or after or None


@dataclass(frozen=True)
class Rounds:
    """What `interleaved_rounds` timed: each round's reference timings in the order taken, each
    variant's timing in each round and the reference bracketing it (None where a timing failed)."""

    reference: list[list[Optional[float]]]
    times: dict[str, list[Optional[float]]]
    around: dict[str, list[Optional[float]]]


def interleaved_rounds(time_reference: Callable[[], Optional[float]],
                       timers: dict[str, Callable[[], Optional[float]]], rounds: int, carry_over: bool,
                       tick: Callable[[], None] = lambda: None) -> Rounds:
    """The one paired-round engine (a dispatch's confirmation rounds, tuner.evaluation.passes, and
    whole models, tuner.stages.model_timing): `rounds` rounds, each the reference, then every
    variant followed by the reference again, the variants' order rotated by one each round, so
    that each variant's timing sits between two reference timings (`bracketing`). With
    `carry_over`, a round after the first opens with the reference timing that closed the one
    before (one chain R v1 R v2 R ...: a round costs one timing fewer, which whole models, a
    process each, need); without, each round opens with a fresh one. `tick` after every timing."""
    names = list(timers)
    done = Rounds([], {n: [] for n in names}, {n: [] for n in names})
    before: Optional[float] = None
    for r in range(rounds):
        taken: list[Optional[float]] = []
        if r == 0 or not carry_over or not names:
            before = time_reference()
            taken.append(before)
            tick()
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            ms = timers[name]()
            tick()
            after = time_reference()
            tick()
            taken.append(after)
            done.times[name].append(ms)
            done.around[name].append(bracketing(before, after))
            before = after
        done.reference.append(taken)
    return done


@dataclass(frozen=True)
class BaselineTiming:
    """One timing of the baseline on a device, at wall-clock time `at` (seconds since the epoch,
    taken when the timing ended)."""

    device: str
    at: float
    median_ms: float
    spread_pct: float


@dataclass(frozen=True)
class Drift:
    """The baseline changed beyond its noise between two timings on one device."""

    device: str
    before: BaselineTiming
    after: BaselineTiming

    @property
    def change(self) -> float:
        """Relative change of the baseline's time (0.5: 50% slower)."""
        return self.after.median_ms / self.before.median_ms - 1.0

    def covers(self, device: str, at: float) -> bool:
        """Whether a timing on `device` that ended at `at` fell inside this drifted span."""
        return device == self.device and self.before.at < at <= self.after.at

    def to_json(self) -> dict:
        return {"device": self.device, "from_ms": self.before.median_ms, "to_ms": self.after.median_ms,
                "change_pct": 100.0 * self.change, "from_at": self.before.at, "to_at": self.after.at}


# The baseline running this much slower in the confirmation rounds than it usually did in the first
# pass (its lower quartile there) means the machine's load changed between the two: the paired
# figures hold for the load of the rounds, which may not be the user's.
LOAD_CHANGE = 0.20


# Fewer baseline timings than this in the first pass say nothing of its quieter part: the lower
# quartile of two is one lucky timing (a two-machine test's tiny dispatch then waited the full
# wait for a load that was never there).
QUIET_TIMINGS = 3


def quiet_level(first_pass: Sequence[BaselineTiming]) -> Optional[float]:
    """The baseline's time in the quieter part of the first pass: the lower quartile of its
    timings there (None with fewer than QUIET_TIMINGS)."""
    if len(first_pass) < QUIET_TIMINGS:
        return None
    ordered = sorted(t.median_ms for t in first_pass)
    return ordered[(len(ordered) - 1) // 4]


def load_threshold(first_pass: Sequence[BaselineTiming]) -> float:
    """How much slower than its quiet level the baseline may run before the load is said to have
    changed: LOAD_CHANGE beyond the baseline's own spread on this device (the median spread of
    its timings in the quieter half of the first pass). A dispatch of a few microseconds whose
    repetitions spread 25% on a quiet machine was said to run under a changed load at 20%."""
    if not first_pass:
        return LOAD_CHANGE
    ordered = sorted(first_pass, key=lambda t: t.median_ms)
    quieter = ordered[: max(1, (len(ordered) + 1) // 2)]
    return LOAD_CHANGE + statistics.median(t.spread_pct for t in quieter) / 100.0


def load_change(first_pass: Sequence[BaselineTiming], rounds_ms: Sequence[float]) -> Optional[float]:
    """How much slower the baseline ran in the confirmation rounds than in the quieter part of the
    first pass (quiet_level), when that is beyond load_threshold; None when it is not, or when
    either side has no timing."""
    quiet = quiet_level(first_pass)
    if quiet is None or not rounds_ms:
        return None
    change = statistics.median(rounds_ms) / quiet - 1.0
    return change if change > load_threshold(first_pass) else None


def model_quiet_ms(earlier_ms: Sequence[float]) -> Optional[float]:
    """A whole model's reference time at its quietest in a run: the lower quartile of its timings
    (QUIET_TIMINGS of them at least; else None)."""
    earlier = sorted(t for t in earlier_ms if t)
    return earlier[(len(earlier) - 1) // 4] if len(earlier) >= QUIET_TIMINGS else None


def model_load_change(earlier_ms: Sequence[float], rounds_ms: Sequence[float]) -> Optional[float]:
    """How much slower a whole model's reference ran in a comparison's rounds (`rounds_ms`) than at
    its quiet level earlier in the run (model_quiet_ms of `earlier_ms`), where that is beyond
    LOAD_CHANGE; else None. (The README's BERT-base layer on a loaded 2-core machine: the default
    timed 241.7 ms in the rounds of a claim, 42-44 ms quiet.)"""
    quiet = model_quiet_ms(earlier_ms)
    rounds = [t for t in rounds_ms if t]
    if quiet is None or not rounds:
        return None
    change = statistics.median(rounds) / quiet - 1.0
    return change if change > LOAD_CHANGE else None


def drifted(a: BaselineTiming, b: BaselineTiming) -> bool:
    """Whether two baseline timings differ beyond their measured noise."""
    noise = max(DRIFT_FLOOR, (a.spread_pct + b.spread_pct) / 100.0)
    return abs(math.log(b.median_ms / a.median_ms)) > math.log1p(noise)


def find_drifts(log: Sequence[BaselineTiming]) -> list[Drift]:
    """Every span between consecutive baseline timings on one device in which the baseline drifted."""
    found = []
    for device in sorted({t.device for t in log}):
        timeline = sorted((t for t in log if t.device == device), key=lambda t: t.at)
        found += [Drift(device, a, b) for a, b in zip(timeline, timeline[1:]) if drifted(a, b)]
    return found


def nearest_baseline(log: Sequence[BaselineTiming], device: str, at: float) -> Optional[BaselineTiming]:
    """The baseline timing on `device` closest in time to `at`: the reference a first-pass time
    is normalised by."""
    same = [t for t in log if t.device == device]
    return min(same, key=lambda t: abs(t.at - at)) if same else None
