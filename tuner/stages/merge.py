"""`MergeStage`: the dispatch winners added to one spec greedily in order of expected gain, each
kept only if the model does not get slower beyond the noise, then the result validated against
the default side by side; a result that makes the model slower is never kept. The same merge
runs on one machine or, a step per device trip, across two (tuner.stages.two_machine)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

from tuner.core.comparison import Paired, model_load_change, model_quiet_ms
from tuner.errors import ToolError
from tuner.stages.base import DispatchOutcome, ModelFigure, ModelState, StageEnv
from tuner.stages.builtin import build_once, compare_on_model, default_off_host, slower_beyond_noise
from tuner.stages.carry_over import carried_over
from tuner.stages.model_timing import Comparison, off_host
from tuner.stages.variants import BuiltVariant, Variant


@dataclass
class MergeStage:
    """Merge the dispatch winners into one spec, greedily by expected gain: each is added to what
    is kept so far, the model built (its configs read back) and timed against the model without
    it in interleaved rounds, numerics compared; kept unless the model gets slower beyond the
    noise. Then the result is timed against the default side by side: if it is not faster, the
    default is the result."""

    name: str = "merge"

    pipeline: Optional[str] = None  # the pipeline the dispatches were tuned with (SearchSettings.pipeline)

    def run(self, state: ModelState, env: StageEnv) -> ModelState:
        _, state = greedy_merge(env, state, lambda step, reference, trial, index, beside=():
                                compare_on_model(env, reference, [trial, *beside], "runs"), self.pipeline)
        return state


# How a merge step is measured: (step "merge" or "validate", reference, trial, merge index, and
# builds to time beside them where the measure can: the model-wide choices alone) -> the
# comparison, or None when it is not measured yet (two machines: it becomes the device's plan).
Measure = Callable[..., Optional[Comparison]]
Pending = tuple[str, BuiltVariant, BuiltVariant, int]


def greedy_merge(env: StageEnv, state: ModelState, measure: Measure,
                 pipeline: Optional[str] = None) -> tuple[Optional[Pending], ModelState]:
    """The merge, on one machine or across two: the winners in order of expected gain, each built
    onto what is kept so far and kept unless the model gets slower with it; then the kept
    winners' configs carried over to the dispatches left untuned (tuner.stages.carry_over, by
    `pipeline`'s), all in one step, kept only where the model is faster with them beyond the
    noise; then the result against the default. Returns the first step `measure` has no figures
    for (None when done) and the state so far."""
    default = build_once(env, Variant("default"))
    if not default.ok:
        raise ToolError(f"the model does not build with the default flags: {default.error}", list(default.flags))
    current = (default if not (state.flags or state.source or state.pinned)
               else build_once(env, Variant("flags", state.flags, source=state.source, pinned=state.pinned)))
    choices = current  # the model-wide choices with the compiler's configs
    parts = sorted((o for o in state.dispatches if o.part is not None), key=lambda o: o.expected_gain, reverse=True)
    outcomes = {o.name: o for o in state.dispatches}
    kept = []

    def so_far() -> ModelState:
        return replace(state, dispatches=tuple(outcomes[o.name] for o in state.dispatches), kept=tuple(kept))

    for i, o in enumerate(parts, 1):
        trial = build_once(env, current.variant.with_part(o.part, f"merge-{i}"))
        if not trial.ok:
            outcomes[o.name] = replace(o, status=f"dropped: {trial.error}")
        else:
            cmp = measure("merge", current, trial, i)
            if cmp is None:
                return ("merge", current, trial, i), so_far()
            outcomes[o.name] = judge_part(o, cmp, trial.variant.name)
            if outcomes[o.name].status == "kept":
                kept.append(o.part)
                current = trial
        env.say(f"  {o.name}: {outcomes[o.name].status}")
    pending, current = _carry_over(env, so_far(), kept, current, len(parts) + 1, measure, pipeline, outcomes)
    if pending is not None:
        return pending, so_far()
    state = so_far()
    if current is default:
        check = default_off_host(env)
        off = f" (but {off_host(check)}, and no build tried computes it right)" if check else ""
        return None, replace(state, verdict=f"nothing to merge beat the default: the default is the result{off}")
    beside = (choices,) if choices is not default and choices is not current and choices.ok else ()
    earlier = list(env.default_ms)  # the default's timings before the last rounds: its quiet level
    final = measure("validate", default, current, 0, beside)
    if final is None:
        return ("validate", default, current, 0), state
    return None, conclude(state, final, current.variant.name, choices.variant.name if beside else None, earlier)


def _carry_over(env: StageEnv, state: ModelState, kept: list, current: BuiltVariant, step: int, measure: Measure,
                pipeline: Optional[str], outcomes: dict) -> tuple[Optional[Pending], BuiltVariant]:
    """The merge's step for the dispatches left untuned (tuner.stages.carry_over): the kept
    winners' configs carried over to them, built onto `current` all at once and kept (added to
    `kept`, their outcomes said) only where the model is faster with them beyond the noise.
    Returns the step where `measure` has no figures for it yet, and what is current after it."""
    carried = carried_over(env, state, kept, pipeline)
    if not carried:
        return None, current
    trial = build_once(env, replace(current.variant, name=f"merge-{step}",
                                    parts=(*current.variant.parts, *(p for _, p, _ in carried))))
    cmp = measure("merge", current, trial, step) if trial.ok else None
    if trial.ok and cmp is None:
        return ("merge", current, trial, step), current
    paired = cmp.paired.get(trial.variant.name) if cmp else None
    said = f"  {len(carried)} untuned dispatches with the configs of the nearest kept winners: "
    if not trial.ok:
        why = trial.error
    elif paired is None or not paired.ratios:
        why = cmp.failed.get(trial.variant.name, "could not be timed")
    elif not paired.beats_baseline or paired.holds_one:
        why = f"the model was {paired.speedup:.3f}x with them, not faster beyond the noise"
    else:
        why = ""
    if why:  # each stays as it was: not tuned, and why
        env.say(said + f"dropped ({why})")
        return None, current
    env.say(said + f"kept ({paired.speedup:.3f}x the model)")
    for o, part, donor in carried:
        outcomes[o.name] = replace(o, status="kept", part=part, model_speedup=paired.speedup, carried_from=donor)
    kept.extend(part for _, part, _ in carried)
    return None, trial


def conclude(state: ModelState, final: Comparison, name: str, choices: Optional[str] = None,
             earlier_ms: Sequence[float] = ()) -> ModelState:
    """The verdict on the tuned model (`name`) timed against the default side by side: kept if it
    is faster (median of the paired rounds above 1 and not slower in 3 of 4 rounds), else the
    default is the result (no flags, no spec). Where the model-wide choices alone (`choices`:
    the compiler's configs) were timed in the same rounds, the verdict splits the figure: what
    the choices give, and what the dispatch configs add to them, per round. Where the default's
    result is off llvm-cpu's (`final.reference_check`) and the tuned model's is not (it was
    timed), the tuned model is the result however it compares: a right model before a fast wrong one.
    `earlier_ms`: the default's timings earlier in the run; where it ran beyond the noise slower in
    these rounds than at its quietest there, the verdict says the figure was measured under load."""
    return _under_load(conclude_figure(state, final, name, choices), final, earlier_ms)


def _under_load(state: ModelState, final: Comparison, earlier_ms: Sequence[float]) -> ModelState:
    """The conclusion, said to be measured under load where the default ran beyond the noise slower
    in the last rounds than at its quietest earlier in the run."""
    change = model_load_change(earlier_ms, final.reference_ms)
    if change is None or state.figure is None:
        return state
    quiet = model_quiet_ms(earlier_ms)
    return replace(state, figure=replace(state.figure, load_change=round(change, 4)),
                   verdict=state.verdict + f"; measured under load: the default ran {1 + change:.1f}x its quiet time "
                                           f"in this run ({_median(final.reference_ms):.3f} ms against {quiet:.3f} ms), "
                                           "so the figure holds for that load only: time it again on a quiet machine")


def conclude_figure(state: ModelState, final: Comparison, name: str, choices: Optional[str] = None) -> ModelState:
    """conclude's decision and figure, before what the load says of it."""
    p = final.paired.get(name)
    if p is None or not p.ratios:
        why = final.failed.get(name, "could not be timed")
        return replace(_unkept(state, "the tuned model failed its check"), flags=(), kept=(), pinned=(), rewrites=(), source=None,
                       verdict=f"the tuned model failed its check ({why}): the default is the result")
    alone = final.paired.get(choices) if choices else None
    if alone is not None and not (alone.ratios and len(alone.ratios) == len(p.ratios)):
        alone = None  # the choices alone were not timed in the same rounds
    on_top = Paired(tuple(t / c for t, c in zip(p.ratios, alone.ratios))) if alone else None  # per round: choices / tuned
    if alone and slower_beyond_noise(on_top) and (  # the merge's own rule, applied to what it kept
            final.reference_check or not (alone.speedup <= 1.0 or slower_beyond_noise(alone) or alone.holds_one)):
        return _choices_alone(state, final, choices, alone, on_top)
    interval = p.interval()
    figure = ModelFigure(default_ms=_median(final.reference_ms), tuned_ms=_median(final.variant_ms[name]),
                         speedup=p.speedup, lower=p.lower, rounds=len(p.ratios), relative_error=final.errors.get(name),
                         interval=interval.to_json() if interval else None)
    not_faster = p.speedup <= 1.0 or slower_beyond_noise(p)
    # A figure whose interval holds 1.0 is no measured gain (issue 63: a small CNN claimed
    # "1.21x (0.98-1.49), faster in 3 of 4"): the default stays, and the verdict says why.
    noisy = not not_faster and p.holds_one
    if not_faster and not final.reference_check:
        return replace(_unkept(state, "the tuned model was not faster than the default"), flags=(), kept=(), pinned=(),
                       rewrites=(), source=None, figure=figure,
                       verdict=f"the tuned model is not faster than the default ({p.speedup:.2f}x in "
                               f"{len(p.ratios)} rounds): the default is the result")
    if noisy and not final.reference_check:
        return replace(_unkept(state, "the tuned model's gain was within the noise"), flags=(), kept=(), pinned=(),
                       rewrites=(), source=None, figure=figure,
                       verdict=f"the tuned model is {p.speedup:.2f}x the default ({interval.text()}), an interval "
                               f"that holds 1.0: the gain is within the noise, so the default is the result")
    won = sum(r > 1.0 for r in p.ratios)
    split = ""
    if alone:
        figure = replace(figure, choices_speedup=alone.speedup, configs_speedup=on_top.speedup)
        won_on_top = f"faster in {sum(r > 1.0 for r in on_top.ratios)} of {len(on_top.ratios)} rounds"
        split = (f"; the model-wide choices alone (the compiler's configs) {alone.speedup:.2f}x the default, the "
                 f"dispatch configs {on_top.speedup:.2f}x on top of them ({won_on_top})" if alone.speedup >= 1.0 else
                 # A raised attention whose compiler's config is far off (160-230x slower than tuned
                 # on SD blocks): the choice pays only with its configs, which is what to say.
                 f"; the model-wide choices need the dispatch configs: alone (the compiler's configs) they are "
                 f"{alone.speedup:.2f}x the default, and the configs make them {on_top.speedup:.2f}x faster "
                 f"({won_on_top})")
    if not_faster:  # and the default's result is off llvm-cpu's
        return replace(state, figure=figure,
                       verdict=f"{off_host(final.reference_check)}, and the tuned model's is not: the tuned "
                               f"model is the result, though {p.speedup:.2f}x the default's time (median of "
                               f"{len(p.ratios)} interleaved rounds)")
    return replace(state, figure=figure,
                   verdict=f"the tuned model is {p.speedup:.2f}x the default (median of {len(p.ratios)} "
                           f"interleaved rounds, faster in {won}" + (f"; {interval.text()}" if interval else "") + ")"
                           + ("" if p.beats_baseline and not noisy else "; within the noise") + split
                           + (f"; numerics {final.numerics}" if final.numerics else "")
                           + (f"; {final.reference_check}" if final.reference_check else ""))


def _unkept(state: ModelState, why: str) -> ModelState:
    """The state with every dispatch the merge kept said dropped, and why: the default is the
    result, so no config is in it (issue 60: "1 of 1 tuned kept" was printed beside an empty spec)."""
    return replace(state, dispatches=tuple(replace(o, status=f"dropped: {why}") if o.status == "kept" else o
                                           for o in state.dispatches))


def _choices_alone(state: ModelState, final: Comparison, choices: str, alone: Paired, on_top: Paired) -> ModelState:
    """The model-wide choices with the compiler's configs as the result: timed in the same rounds,
    the tuned model (the choices with the kept dispatch configs) was slower than they were beyond
    the noise, so no dispatch config is kept."""
    interval = alone.interval()
    rounds = len(on_top.ratios)
    figure = ModelFigure(default_ms=_median(final.reference_ms), tuned_ms=_median(final.variant_ms.get(choices, ())),
                         speedup=alone.speedup, lower=alone.lower, rounds=len(alone.ratios),
                         relative_error=final.errors.get(choices), interval=interval.to_json() if interval else None,
                         choices_speedup=alone.speedup, configs_speedup=on_top.speedup)
    slower = sum(r < 1.0 for r in on_top.ratios)
    won = sum(r > 1.0 for r in alone.ratios)
    unkept = _unkept(state, f"the model-wide choices were faster without the dispatch configs ({on_top.speedup:.2f}x "
                            f"with them, slower in {slower} of {rounds} rounds)")
    return replace(unkept, kept=(), figure=figure,
                   verdict=f"the model-wide choices alone (the compiler's configs) are the result: {alone.speedup:.2f}x "
                           f"the default (median of {len(alone.ratios)} interleaved rounds, faster in {won}"
                           + (f"; {interval.text()}" if interval else "") + ")"
                           + ("" if alone.beats_baseline else "; within the noise")
                           + f"; with the dispatch configs they were {on_top.speedup:.2f}x (slower in {slower} of "
                             f"{rounds} rounds), so none is kept"
                           + (f"; numerics {final.numerics}" if final.numerics else "")
                           + (f"; {final.reference_check}" if final.reference_check else ""))


def judge_part(o: DispatchOutcome, cmp: Comparison, name: str) -> DispatchOutcome:
    """A dispatch's config on the model: dropped if the model with it failed or got slower
    beyond the noise than without it, else kept."""
    p = cmp.paired.get(name)
    if p is None or not p.ratios:
        return replace(o, status=f"dropped: {cmp.failed.get(name, 'could not be timed')}")
    if slower_beyond_noise(p):
        slower = sum(r < 1.0 for r in p.ratios)
        return replace(o, status=f"dropped: the model was slower with it in {slower} of {len(p.ratios)} rounds "
                                 f"({p.speedup:.3f}x)", model_speedup=p.speedup)
    return replace(o, status="kept", model_speedup=p.speedup)


def _median(values) -> float:
    values = [v for v in values if v]
    return statistics.median(values) if values else 0.0
