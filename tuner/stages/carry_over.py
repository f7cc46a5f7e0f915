"""Tuned configs carried over to the dispatches the dispatch stage did not tune.

Under a time budget the dispatch stage tunes the few dispatches with the largest shares, and a
CNN's time is spread over many: ResNet-50 at batch 8 on the H200 formed 20 matmul shapes of
1-6% of its time each, seven minutes tuned two of them, and the rest ran with the compiler's
configs (docs/benchmarks/real-exports.md). A winner's knobs often suit a dispatch of the same
kind under the same pipeline: each dispatch left untuned for lack of rank or time is
given the knobs of the kept winner nearest to it in shape (the log of its loop bounds) that its
own constraints admit. The merge builds them onto its result all at once and keeps them only
where the model is faster with them beyond the noise (tuner.stages.merge); nothing is searched
or timed alone here."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import z3

from constraints import Problem
from pipelines import Dispatch
from pipelines.base import Pipeline
from tuner.errors import TunerError
from tuner.specs.candidates import as_matched
from tuner.stages.base import DispatchOutcome, ModelState, StageEnv
from tuner.stages.selection import UNTUNED_FOR_RANK, UNTUNED_FOR_TIME, tuning_pipeline
from tuner.stages.flag_options import formed_dispatches
from tuner.stages.variants import SpecPart

CARRIED = "carried from"  # a carried part's label: "LABEL (carried from DISPATCH)"


def carried_over(env: StageEnv, state: ModelState, kept: Sequence[SpecPart],
                 pipeline_name: Optional[str] = None) -> list[tuple[DispatchOutcome, SpecPart, str]]:
    """Each dispatch of the model the dispatch stage left untuned for lack of rank or time that a
    pipeline takes, with the config of the nearest `kept` winner of its kind and pipeline whose
    knobs its constraints admit, and that winner's dispatch (none where no winner's do)."""
    untuned = [o for o in state.dispatches if o.part is None and o.status.startswith((UNTUNED_FOR_RANK, UNTUNED_FOR_TIME))]
    if not untuned or not kept:
        return []
    formed = {d.name: d for d in formed_dispatches(env, state.source or env.model, state.flags)}
    carried = []
    for outcome in untuned:
        dispatch = formed.get(outcome.name)
        pipeline = tuning_pipeline(dispatch, pipeline_name) if dispatch is not None else None
        if pipeline is None:
            continue
        donors = sorted((p for p in kept if p.dispatch.kind == dispatch.kind and p.config.knobs
                         and _same_pipeline(tuning_pipeline(p.dispatch, pipeline_name), pipeline)),
                        key=lambda p: _distance(p.dispatch, dispatch))
        try:
            problem = pipeline.build_problem(dispatch) if donors else None
        except (TunerError, ValueError, z3.Z3Exception):  # no constraints for it: nothing carried
            continue
        for donor in donors:
            part = _carried(dispatch, pipeline, problem, donor, env)
            if part is not None:
                carried.append((outcome, part, donor.dispatch.name))
                break
    return carried


def _carried(dispatch: Dispatch, pipeline: Pipeline, problem: Problem, donor: SpecPart,
             env: StageEnv) -> Optional[SpecPart]:
    """The donor's knobs as a config of `dispatch`, or None where its constraints (`problem`)
    refuse them."""
    knobs = donor.config.knobs
    try:
        if not (problem.admits(knobs) and pipeline.admits(dispatch, knobs)):
            return None
        config = as_matched(dispatch, pipeline, pipeline.to_config(dispatch, knobs, env.ctx))
    except (KeyError, ValueError, TypeError, TunerError, z3.Z3Exception):  # a knob the other problem lacks, say
        return None
    if not config.compilation_info or config.flags:  # only a config a spec carries (not a flag)
        return None
    return SpecPart(dispatch, config, f"{config.summary or donor.label} ({CARRIED} {donor.dispatch.name})")


def _same_pipeline(a: Optional[Pipeline], b: Pipeline) -> bool:
    return a is not None and a.name == b.name


def _distance(a: Dispatch, b: Dispatch) -> float:
    """How far apart two dispatches' shapes are: the summed log-ratios of their loop bounds
    (infinite where their ranks differ)."""
    if len(a.loop_bounds) != len(b.loop_bounds):
        return math.inf
    return sum(abs(math.log(max(x, 1)) - math.log(max(y, 1))) for x, y in zip(a.loop_bounds, b.loop_bounds))
