"""Ranking: a pure function of the results. A winner is named only among candidates timed side
by side with the baseline in this run's interleaved rounds, and only if it beat the baseline
beyond the noise (tuner.core.comparison.Paired.beats_baseline) and the interval of its claimed
speedup excludes 1.0; otherwise the default stays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from tuner.core.comparison import WIN_SHARE, Paired, leading, simpler_within_noise
from tuner.core.results import Result


@dataclass(frozen=True)
class Ranking:
    baseline: Optional[Result]
    # Successful candidates: those confirmed in interleaved rounds, by paired speedup, then the
    # others by their first-pass figure (shown, never a winner).
    ranked: tuple[Result, ...]
    failed: tuple[Result, ...]
    best: Optional[Result]  # None: no candidate beat the default beyond the noise
    verdict: str  # one line: why `best` is what it is

    def speedup(self, result: Result) -> Optional[float]:
        """The paired speedup over the baseline (>1 is faster than the default), for candidates
        confirmed in this run; 1.0 for the baseline; None for the others."""
        if result.is_baseline and result.ok:
            return 1.0
        return result.speedup

    def within_noise_of_best(self) -> tuple[Result, ...]:
        """Other confirmed candidates whose paired speedup reaches the winner's lower ratio (the
        one it beat in WIN_SHARE of the rounds): the data cannot tell them apart from it."""
        best = self.best
        if best is None:
            return ()
        floor = best.paired.lower
        return tuple(r for r in self.ranked if r is not best and not r.is_baseline and r.confirmed
                     and (r.speedup or 0.0) >= floor)


# An interval whose ends are further apart than this factor is said to be wide in the verdict
# (MobileBERT's 0.11 ms bottleneck was claimed 1.95x, 1.11-4.15, on the 2-core machine).
WIDE_INTERVAL = 1.5


def _faster(ratios) -> int:
    return sum(x > 1.0 for x in ratios)


def _order(r: Result) -> tuple:
    if r.is_baseline:
        return (0, -1.0, r.candidate_id)
    if r.confirmed:
        return (0, -(r.speedup or 0.0), r.candidate_id)
    return (1, -(r.first_pass_speedup or 0.0), r.median_ms or 0.0, r.candidate_id)


def rank(results: Iterable[Result]) -> Ranking:
    """Order the candidates that compiled, ran and matched the baseline's numerics, and name the
    winner: the confirmed candidate whose rounds hold up best (comparison.leading: the lower
    quantile of its paired ratios, then their median) among those faster than the
    baseline in at least WIN_SHARE of the rounds whose rounds settled (Result.unsettled), if it
    is faster beyond the noise in the fresh rounds timed after it was chosen too (its speedup is
    theirs: Result.holdout_ratios)."""
    results = list(results)
    baseline = next((r for r in results if r.is_baseline), None)
    ok = sorted((r for r in results if r.ok and r.median_ms is not None), key=_order)
    failed = tuple(r for r in results if not r.ok)
    confirmed = [r for r in ok if r.confirmed and not r.is_baseline]
    winners = [r for r in confirmed if r.paired.beats_baseline and not r.unsettled]
    lead = max(winners, key=lambda r: leading(r.paired, r.candidate_id)) if winners else None
    preferred = ""
    if lead is not None:
        lead, preferred = simpler_within_noise(lead, winners, lambda r: r.paired)
    held = lead is not None and (not lead.holdout_ratios or Paired(tuple(lead.holdout_ratios)).beats_baseline)
    # A claim whose interval holds 1.0 is no measured gain, however its rounds fell (a small CNN's
    # "1.21x (0.98-1.49), faster in 3 of 4", issue 63): the default stays.
    claim = lead.speedup_interval if lead is not None else None
    noisy = held and Paired(tuple(lead.speedup_ratios)).holds_one
    best = lead if held and not noisy else None
    share = f"{WIN_SHARE:.0%}"
    if best is not None:
        ok = [r for r in ok if r is not best]
        ok.insert(1 if ok and ok[0].is_baseline else 0, best)
        interval = best.speedup_interval
        verdict = (f"candidate {best.candidate_id} ({best.label}) is {best.speedup:.2f}x the default"
                   + (f" ({interval.text()})" if interval else "") + ": ") + (
            f"the median of {len(best.holdout_ratios)} fresh interleaved rounds timed after it was chosen, faster in "
            f"{_faster(best.holdout_ratios)} of them ({best.paired.speedup:.2f}x in the {len(best.round_ratios)} "
            f"rounds that chose it)" if best.holdout_ratios else
            f"the median of {len(best.round_ratios)} interleaved rounds, faster in {_faster(best.round_ratios)} of them")
        verdict += f"; {preferred}" if preferred else ""
        if interval and interval.high > WIDE_INTERVAL * interval.low:
            verdict += (f"; a wide interval: the rounds scatter on this machine (a short dispatch, or a load that "
                        f"comes and goes), so the gain is known only to within {interval.low:.2f}-{interval.high:.2f}x; "
                        "more --confirm-rounds narrow it")
    elif noisy:
        verdict = (f"no candidate beat the default beyond the noise: candidate {lead.candidate_id} was "
                   f"{lead.speedup:.2f}x ({claim.text()}), an interval that holds 1.0, so the gain is within the "
                   f"noise: keeping the compiler's default")
    elif lead is not None:
        verdict = (f"no candidate beat the default beyond the noise: candidate {lead.candidate_id} was "
                   f"{lead.paired.speedup:.2f}x in the rounds that chose it, but faster in only "
                   f"{_faster(lead.holdout_ratios)} of {len(lead.holdout_ratios)} fresh rounds timed after (a winner "
                   f"must be faster in {share} of them; their median, {lead.speedup:.2f}x, is not a measured gain): "
                   f"keeping the compiler's default")
    elif not any(not r.is_baseline for r in results):
        verdict = "no candidate to try (the space holds no config for it): keeping the compiler's default"
    elif not any(r.ok for r in results if not r.is_baseline):
        verdict = "no candidate ran successfully: keeping the compiler's default"
    elif not confirmed:
        verdict = ("no candidate was timed side by side with the baseline (confirmation rounds off): "
                   "keeping the compiler's default")
    elif any(r.unsettled for r in confirmed):
        top = next(r for r in confirmed if r.unsettled)
        verdict = (f"no candidate beat the default beyond the noise: candidate {top.candidate_id} was faster in "
                   f"{_faster(top.round_ratios)} of {len(top.round_ratios)} interleaved rounds "
                   f"({top.speedup:.2f}x), but its first rounds and the ones timed after them disagreed, so the "
                   f"difference is within the noise: keeping the compiler's default")
    else:
        top = confirmed[0]
        verdict = (f"no candidate beat the default beyond the noise (faster in at least {share} of the interleaved "
                   f"rounds); the closest, candidate {top.candidate_id}, was {top.speedup:.2f}x, faster in "
                   f"{_faster(top.round_ratios)} of {len(top.round_ratios)}: keeping the compiler's default")
    if baseline is not None and baseline.load_change is not None and confirmed:
        verdict += (f"; measured under a load that did not pass (the baseline {100 * baseline.load_change:.0f}% slower "
                    f"in the rounds than in the quieter part of the first pass): the figures hold only for that load")
    return Ranking(baseline, tuple(ok), failed, best, verdict)
