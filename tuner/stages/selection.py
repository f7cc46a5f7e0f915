"""Which of a model's dispatches a stage tunes: one per distinct matcher (`signature`), the
largest share of the model's time first, each with the pipeline that tunes it
(`tuning_pipeline`), and for every other one an outcome that says why not."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from pipelines import Dispatch, Pipeline, pipeline_for, why_untunable
from tuner.stages.base import DispatchOutcome

# How an outcome's status begins where a dispatch the stage could tune was left untuned: ranked
# below what was asked (--top, --min-share), or past the stage's time (tuner.stages.carry_over
# gives such dispatches a tuned winner's config).
UNTUNED_FOR_RANK = "not tuned: below"
UNTUNED_FOR_TIME = "not tuned: the dispatch stage's"


def tuning_pipeline(dispatch: Dispatch, name: Optional[str] = None) -> Optional[Pipeline]:
    """The pipeline a model's dispatch is tuned with: the one named (`SearchSettings.pipeline`)
    where it takes the dispatch, else the one for the compiler's own choice; None where none does."""
    return (pipeline_for(dispatch, name) if name else None) or pipeline_for(dispatch)


def signature(d: Dispatch, pipeline_name: Optional[str] = None) -> tuple:
    """What a spec's matcher sees: two dispatches alike in it are tuned once, matched by one. A
    pipeline whose matchers also require the ops after the root (Pipeline.matches_ops_after,
    which gives its configs their StoredThrough part: tuner.specs.candidates.as_matched) tells
    same-shaped dispatches apart by them."""
    pipeline = tuning_pipeline(d, pipeline_name)
    after = d.other_ops if pipeline is not None and pipeline.matches_ops_after else None
    return (d.kind, d.op_name, d.loop_bounds, d.lhs_type, d.rhs_type, d.out_type, d.indexing_maps, after)


def select_dispatches(program, measured, workload, min_share: float, top: Optional[int], kinds: Sequence[str] = (),
                      pipeline_name: Optional[str] = None
                      ) -> tuple[list[tuple[Dispatch, DispatchOutcome]], list[DispatchOutcome]]:
    """The dispatches to tune (one per distinct shape of the `kinds` asked for, every kind if none,
    the largest share first: `top` of them, or those with at least `min_share`), and an outcome
    saying why for every other one. `pipeline_name`: the pipeline asked for (tuning_pipeline)."""
    share = (lambda n: measured.share(n)) if measured else (lambda n: None)
    outcomes: list[DispatchOutcome] = []
    todo: list[tuple[Dispatch, DispatchOutcome]] = []
    groups: dict[tuple, list[Dispatch]] = {}
    for d in program.dispatches:
        if program.entries.get(d.name) == workload:
            groups.setdefault(signature(d, pipeline_name), []).append(d)
        else:
            outcomes.append(DispatchOutcome(d.name, d.shape_name, None, "not tuned: run by another function "
                                                                       f"than the model's @{workload.entry}"))
    for members in groups.values():
        total = sum(share(d.name) or 0.0 for d in members) if measured else None
        lead = max(members, key=lambda d: share(d.name) or 0.0)
        others = tuple(d.name for d in members if d is not lead)
        profiled = [measured.times[d.name] for d in members if measured and d.name in measured.times]
        outcome = DispatchOutcome(lead.name, lead.shape_name, total, "", also_covers=others,
                                  profile_ms=sum(t.total_ms for t in profiled) if profiled else None,
                                  calls=sum(t.runs for t in profiled) if profiled else None)
        if tuning_pipeline(lead, pipeline_name) is None:
            outcomes.append(replace(outcome, status=f"not tuned: {why_untunable(lead)}"))
        elif kinds and lead.kind.value not in kinds:
            outcomes.append(replace(outcome, status=f"not tuned: a {lead.kind.value}, not among the kinds asked for "
                                                    f"({', '.join(kinds)})"))
        else:
            todo.append((lead, outcome))
    for name, why in program.skipped:
        outcomes.append(DispatchOutcome(name, "", share(name), f"not tuned: {why}"))
    todo.sort(key=lambda t: t[1].share or 0.0, reverse=True)
    chosen = todo[:top] if top is not None else [t for t in todo if (t[1].share or 0.0) >= min_share]
    for lead, outcome in todo:
        if (lead, outcome) not in chosen:
            what = f"the top {top}" if top is not None else f"{100 * min_share:.0f}% of the time"
            outcomes.append(replace(outcome, status=f"{UNTUNED_FOR_RANK} {what}"))
    return chosen, outcomes


def by_share(outcomes) -> tuple[DispatchOutcome, ...]:
    return tuple(sorted(outcomes, key=lambda o: o.share or 0.0, reverse=True))
