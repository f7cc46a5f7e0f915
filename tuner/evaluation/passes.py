"""One evaluation's passes over the built candidates: the first pass, the candidates timed in a
span where the baseline drifted timed again, each first-pass time against the baseline timing
nearest to it, then the most promising confirmed side by side with the baseline in interleaved
rounds. Runtime-only, like tuner.evaluation.measure."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable, Optional, Protocol

from tuner.core.comparison import (MAX_ROUND_BATCHES, BaselineTiming, Drift, Paired, interleaved_rounds,
                                         contested, find_drifts, leading, load_change, load_threshold, paired,
                                         quiet_level, settled, simpler_within_noise)
from tuner.evaluation.measure import Built, DeviceLost, Measurer, Progress, Recorder, first_pass_speedup
from tuner.core.results import EvaluationStats, Result
from tuner.core.settings import EvalSettings
from tuner.store import ResultStore
from tuner.tools import kill_running_tools

# The winner's fresh rounds (holdout_rounds): this many times --confirm-rounds.
HOLDOUT_BATCHES = 2

# While waiting for a load to pass before the confirmation rounds, the baseline is timed this often.
QUIET_POLL_S = 5.0

class Batch(Protocol):
    """What an evaluation's passes ask of the one that runs them (an evaluator's schedule, the
    two-machine benchmark step): the first pass, the modules it built, and modules for stored
    results chosen for confirmation (measured in an earlier run, so this one has none for them)."""

    def first_pass(self, measurer: Measurer, recorder: Recorder) -> None:
        """Measure the batch's candidates not measured before, recording each result as it arrives."""
        ...

    def runnable(self) -> dict[str, Built]:
        """The modules this run built that can run, by candidate key."""
        ...

    def rebuild(self, chosen: list[Result]) -> dict[str, Built]:
        """Modules for `chosen` (stored results), by key, for those it could build."""
        ...


@dataclass(frozen=True)
class PassSetup:
    """What an evaluation's passes measure with: the measurer (the runner and the baseline's
    timeline), the settings, the store results go to, the devices and the progress callback."""

    measurer: Measurer
    settings: EvalSettings
    store: ResultStore
    devices: tuple[str, ...]
    progress: Optional[Progress] = None
    on_result: Optional[Callable[[Result], None]] = None  # each first-pass result as it is stored


def measure_pass(strategy: str, todo: int, reused: list[Result], batch: Batch,
                 setup: PassSetup) -> tuple[list[Result], EvaluationStats]:
    """One evaluation, every figure in it a comparison with the baseline under the same conditions:

    1. `batch.first_pass` measures the `todo` candidates, recording each result as it arrives;
       the measurer times the baseline every few candidates per device. An interruption kills
       every tool still running.
    2. Where the baseline drifted beyond its noise, the candidates timed in that span are timed
       once more (once at most).
    3. Each first-pass time is normalised by the baseline timing nearest to it on its device.
    4. The baseline and the most promising few (stored results in `reused` included: they are
       built again, `batch.rebuild`) are timed in interleaved rounds; each one's speedup is the
       median of its per-round ratios to the baseline (see tuner.core.comparison).

    Results come back in candidate order, with where the time went and the drifts seen."""
    measurer, settings, store, devices, progress = setup.measurer, setup.settings, setup.store, setup.devices, setup.progress
    recorder = Recorder(store, todo, progress, log=measurer.log, on_result=setup.on_result)
    start = time.perf_counter()
    try:
        batch.first_pass(measurer, recorder)
        measurer.close_timeline()
        drifts = find_drifts(measurer.log)
        built = batch.runnable()
        results = retime_drifted(recorder.results, drifts, built, measurer, store, progress)
    except BaseException:
        kill_running_tools()  # leave no compile or benchmark running behind an interrupted run
        raise
    wall = time.perf_counter() - start
    normalised = [first_pass_speedup(r, measurer.log) for r in results]
    for r in normalised:
        if r.first_pass_speedup is not None:
            store.put(r)  # a later run picks what to confirm by it
    results = normalised + reused
    start = time.perf_counter()
    try:
        confirmed = confirm(results, built, measurer, settings, store, progress, batch.rebuild)
        results = confirmed.results
    except BaseException:
        kill_running_tools()
        raise
    baseline = next((r for r in results if r.is_baseline), None)
    stats = EvaluationStats.of(strategy, recorder.results, len(reused), wall, time.perf_counter() - start, devices,
                               drifts=[d.to_json() for d in drifts], retimed=sum(r.retimed for r in results),
                               baseline_timings=len(measurer.log),
                               baseline_ms=[(t.device, t.at, t.median_ms) for t in measurer.log],
                               load_change=baseline.load_change if baseline else None,
                               lost_devices=list(measurer.lost.values()),
                               reused_confirmation=confirmed.reused_at, waited_for_quiet_s=confirmed.waited_s)
    return sorted(results, key=lambda r: r.candidate_id), stats


def retime_drifted(results: list[Result], drifts: list[Drift], built: dict[str, Built], measurer: Measurer,
                   store: ResultStore, progress: Optional[Progress] = None) -> list[Result]:
    """Time once more every candidate whose first-pass time fell in a span where the baseline
    drifted, on the device that timed it, with the baseline timed around them again."""
    drifted = [i for i, r in enumerate(results) if r.ok and not r.is_baseline and r.timed_at is not None
               and r.key in built and r.device not in measurer.lost
               and any(d.covers(r.device, r.timed_at) for d in drifts)]
    if not drifted:
        return results
    results = list(results)
    for device in sorted({results[i].device for i in drifted}):
        measurer.time_baseline(device)
    for n, i in enumerate(drifted, 1):
        try:
            results[i] = measurer.retime(results[i], built[results[i].key])
        except DeviceLost:
            continue  # its first-pass time stands
        store.put(results[i])
        if progress:
            progress("re-time", n, len(drifted))
    measurer.close_timeline()
    return results


@dataclass(frozen=True)
class Bench:
    """Where confirmation rounds are timed: the built modules, the measurer, its device, and who
    hears the progress."""

    built: dict[str, Built]
    measurer: Measurer
    device: str
    progress: Optional[Progress] = None


@dataclass(frozen=True)
class Confirmation:
    """The results after the confirmation rounds, when reused rounds were taken (seconds since
    the epoch; None where this run timed them) and how long the rounds waited for a load to pass."""

    results: list[Result]
    reused_at: Optional[float] = None
    waited_s: float = 0.0


# A flag-only candidate (a model-wide flag such as data tiling, no config of its own) within this
# share of the best first-pass figure is confirmed too, even beyond `confirm_top`: it is what a
# user would do without the tuner, so a winner must be shown against it side by side.
FLAG_ONLY_NEAR = 0.85


def chosen_for_confirmation(results: list[Result], top: int) -> list[Result]:
    """The `top` candidates with the best first-pass figures, and any flag-only candidate near
    the best (FLAG_ONLY_NEAR) beside them."""
    ranked = sorted((r for r in results if r.ok and not r.is_baseline and r.first_pass_speedup),
                    key=lambda r: (-(r.first_pass_speedup or 0.0), r.candidate_id))
    chosen = ranked[:top]
    if chosen:
        near = (chosen[0].first_pass_speedup or 0.0) * FLAG_ONLY_NEAR
        chosen += [r for r in ranked[top:] if r.config_flags and not r.compilation_info
                   and (r.first_pass_speedup or 0.0) >= near]
    return chosen


def confirm(results: list[Result], built: dict[str, Built], measurer: Measurer, settings: EvalSettings,
            store: ResultStore, progress: Optional[Progress] = None,
            rebuild: Optional[Callable[[list[Result]], dict[str, Built]]] = None) -> "Confirmation":
    """Time the baseline and the `confirm_top` candidates with the best first-pass figures in
    `confirm_rounds` interleaved rounds on the first device. A round times the baseline, then each
    candidate followed by the baseline again (B c1 B c2 B ...; the candidates' order rotated every
    round), so every candidate's ratio in the round is against the two baseline timings that
    bracket it: a change of load within the round moves both sides of the ratio alike.
    Only results confirmed here can win; stored ones among the chosen are built again first. A
    winner whose figures disagree is timed in more rounds (`more_rounds`). The rounds of an
    earlier run that confirmed the same candidates the same way are reused instead, unless
    `settings.reconfirm` (`finished_confirmation`)."""
    baseline = next((r for r in results if r.is_baseline and r.ok), None)
    if baseline is None or settings.confirm_rounds < 1 or settings.confirm_top < 1:
        return Confirmation(results)
    promising = chosen_for_confirmation(results, settings.confirm_top)
    if not promising or baseline.key not in built:
        return Confirmation(results)
    finished = None if settings.reconfirm else finished_confirmation(baseline, promising, built, measurer, store,
                                                                     settings.confirm_rounds)
    if finished is not None:
        updated, written_at = finished
        return Confirmation([updated.get(r.key, r) for r in results], reused_at=written_at)
    missing = [r for r in promising if r.key not in built]
    if missing and rebuild is not None:
        built = {**built, **rebuild(missing)}
    others = [r for r in promising if r.key in built]
    if not others:
        return Confirmation(results)
    first_pass = list(measurer.log)
    waited = 0.0
    while True:
        device = measurer.confirm_device()
        if device is None:
            return Confirmation(results)  # every device was lost: nothing can be confirmed
        on_device = [t for t in first_pass if t.device == device]
        try:
            waited += await_quiet(built[baseline.key], on_device, measurer, device, settings.quiet_wait_s, progress)
            bench = Bench(built, measurer, device, progress)
            times, references, baseline_rounds = _rounds(baseline, others, bench, settings.confirm_rounds)
            break
        except DeviceLost:
            continue  # lost mid-rounds: all of them again on another device, as a round is one comparison
    rounds = {r.key: paired(references[r.key], times[r.key]) for r in others}
    unsettled = more_rounds(baseline, others, rounds, times, baseline_rounds, bench, settings.confirm_rounds)
    holdout = holdout_rounds(baseline, others, rounds, unsettled, baseline_rounds, bench, settings.confirm_rounds)
    change = load_change(on_device, baseline_rounds)
    updated = {baseline.candidate_id: replace(baseline, rounds_ms=baseline_rounds, load_change=change,
                                              round_ratios=[1.0] * len(baseline_rounds))}
    for r in others:
        updated[r.candidate_id] = replace(r, rounds_ms=[t for t in times[r.key] if t is not None],
                                          round_ratios=list(rounds[r.key].ratios), unsettled=r.key in unsettled,
                                          holdout_ratios=list(holdout.get(r.key, ())))
    for r in updated.values():
        store.put(r)
    store.put_confirmation([updated[baseline.candidate_id], *(updated[r.candidate_id] for r in others)],
                           settings.confirm_rounds, **_conditions(measurer, built[baseline.key], device),
                           loaded=change is not None)
    return Confirmation([updated.get(r.candidate_id, r) for r in results], waited_s=waited)


def _conditions(measurer: Measurer, b: Built, device: str) -> dict:
    identity = measurer.identity(b, device)
    return {"device_id": identity["device_id"], "timing": identity["timing"]}


def finished_confirmation(baseline: Result, promising: list[Result], built: dict[str, Built], measurer: Measurer,
                          store: ResultStore, rounds: int) -> Optional[tuple[dict[str, Result], float]]:
    """The rounds of an earlier run that confirmed exactly these candidates in as many rounds on a
    device like the one these would run on, timed the same way, on a machine whose load did not
    change (a rerun of a finished tuning): each result with those rounds, by key, and when they
    were written; None where the store holds none."""
    device = measurer.confirm_device()
    if device is None:
        return None
    found = store.confirmation(baseline.key, [r.key for r in promising], rounds,
                               **_conditions(measurer, built[baseline.key], device))
    if found is None:
        return None
    stored, written_at = found
    by_key = {r.key: r for r in [baseline, *promising]}
    return {s.key: replace(by_key[s.key], rounds_ms=s.rounds_ms, round_ratios=s.round_ratios, unsettled=s.unsettled,
                           load_change=s.load_change, holdout_ratios=s.holdout_ratios)
            for s in stored if s.key in by_key}, written_at


def await_quiet(baseline: Built, first_pass: list[BaselineTiming], measurer: Measurer, device: str, wait_s: float,
                progress: Optional[Progress] = None) -> float:
    """Wait until the machine is as quiet as in the quieter part of the first pass
    (comparison.quiet_level): the baseline is timed on `device`, and while it runs slower beyond
    comparison.load_threshold (or this timing's own spread) it is timed again every QUIET_POLL_S,
    for up to `wait_s` seconds. Returns the seconds waited (the load may not have passed: the
    rounds then see it)."""
    level = quiet_level(first_pass)
    if level is None:
        return 0.0
    threshold = load_threshold(first_pass)
    start = time.monotonic()
    while True:
        timing, _ = measurer.timing(baseline, device)
        waited = time.monotonic() - start
        if timing is None or timing.median_ms <= level * (1.0 + max(threshold, timing.spread_pct / 100.0)):
            return waited
        if waited >= wait_s:
            return waited
        if progress:
            progress("waiting for the load to pass", min(int(waited), int(wait_s)), int(wait_s))
        time.sleep(min(QUIET_POLL_S, wait_s - waited))


def holdout_rounds(baseline: Result, others: list[Result], rounds: dict[str, Paired], unsettled: set[str],
                   baseline_rounds: list[float], bench: Bench, batch: int) -> dict[str, tuple[float, ...]]:
    """The would-be winner (the settled candidate faster beyond the noise with the highest
    median) timed against the baseline in HOLDOUT_BATCHES x `batch` fresh interleaved rounds
    (a median of 4 rounds moved by up to 15% on the noisy 2-core machine): its ratios there, by
    key (none where there is no such candidate, or the device went away). The rounds that chose
    it are the luckiest of several noisy figures; on a noisy 2-core machine the claims from them
    ran 15-25% above plain iree-compile's side-by-side figure."""
    chosen = [r for r in others if rounds[r.key].beats_baseline and r.key not in unsettled]
    if not chosen:
        return {}
    lead = max(chosen, key=lambda r: leading(rounds[r.key], r.candidate_id))
    lead, _ = simpler_within_noise(lead, chosen, lambda r: rounds[r.key])
    try:
        times, references, more_baseline = _rounds(baseline, [lead], bench, HOLDOUT_BATCHES * batch,
                                                   phase="hold-out")
    except DeviceLost:
        return {}
    baseline_rounds += more_baseline
    return {lead.key: paired(references[lead.key], times[lead.key]).ratios}


def more_rounds(baseline: Result, others: list[Result], rounds: dict[str, Paired], times: dict[str, list],
                baseline_rounds: list[float], bench: Bench, batch: int) -> set[str]:
    """Time the contested winners (tuner.core.comparison.contested) in more interleaved
    rounds, `batch` rounds at a time (as many as the first), up to MAX_ROUND_BATCHES in all, until a batch
    leaves the verdict where the rounds before it put it. `rounds`, `times` and `baseline_rounds` grow
    in place; returns the keys of those still unsettled after the last batch (they cannot win:
    their difference from the default is within the noise)."""
    todo = [r for r in others if contested(rounds[r.key], r.first_pass_speedup)]
    for _ in range(MAX_ROUND_BATCHES - 1):
        if not todo:
            return set()
        try:
            more, references, more_baseline = _rounds(baseline, todo, bench, batch, phase="more rounds")
        except DeviceLost:
            break  # the device went away: what is still contested stays so
        baseline_rounds += more_baseline
        still = []
        for r in todo:
            later = paired(references[r.key], more[r.key])
            if not settled(rounds[r.key], later):
                still.append(r)
            rounds[r.key] = rounds[r.key].then(later)
            times[r.key] += more[r.key]
        todo = still
    return {r.key for r in todo}


def _rounds(baseline: Result, others: list[Result], bench: Bench, rounds: int, phase: str = "confirm"
            ) -> tuple[dict[str, list[Optional[float]]], dict[str, list[Optional[float]]], list[float]]:
    """The interleaved rounds of `confirm` on one device: each candidate's times, the bracketing
    baseline reference for each, and the baseline's median per round."""
    total, done = rounds * (2 * len(others) + 1), 0

    def tick() -> None:
        nonlocal done
        done += 1
        if bench.progress:
            bench.progress(phase, done, total)

    def time_one(r: Result) -> Callable[[], Optional[float]]:
        def timed() -> Optional[float]:
            timing, _ = bench.measurer.timing(bench.built[r.key], bench.device)
            return timing.median_ms if timing is not None else None
        return timed

    taken = interleaved_rounds(time_one(baseline), {r.key: time_one(r) for r in others}, rounds, carry_over=False,
                               tick=tick)
    baseline_rounds = [statistics.median(ok) for ok in ([t for t in ts if t is not None] for ts in taken.reference) if ok]
    times, references = taken.times, taken.around
    return times, references, baseline_rounds
