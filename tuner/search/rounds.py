"""A search across two machines, in rounds: each `tune --compile-only` replays the search against
the results the run's store already holds (measured by `benchmark DIR` on the device machine and
copied back) and compiles the first batch that has points with no result yet.

Searches are deterministic given their seed and what they observed, so replaying the same
observations proposes the same batches; the manifest holds every candidate proposed so far, so
`benchmark DIR` reuses the stored figures of earlier rounds and confirms the best of all of them
against the baseline. The time budget does not apply here (the seconds are spent on two machines)."""

from __future__ import annotations

from iree.compiler import ir

from pipelines import Dispatch, Pipeline
from tuner.specs.candidates import Candidate, baseline
from tuner.specs.transform import Pinned
from tuner.search.live import SearchPlan, add_candidates, note_proposers, outcomes
from tuner.search.loop import Budget, run_search
from tuner.store import ResultStore


class _Unmeasured(Exception):
    """The batch the search proposed has points the store holds no result for: the round ends
    there (`last`: whether that batch is the search's last)."""

    def __init__(self, last: bool) -> None:
        super().__init__("a batch not measured yet")
        self.last = last


def next_round(plan: SearchPlan, dispatch: Dispatch, pipeline: Pipeline, ctx: ir.Context, spec_entry: str,
               store: ResultStore, pinned: Pinned = ()) -> tuple[list[Candidate], bool]:
    """The baseline and every candidate the search has proposed up to and including its next
    unmeasured batch, and whether that batch is the search's last (budget or space spent). The
    batches already measured are recorded in `plan.steps`: the search loop (run_search) is run
    with the store's results as its evaluation, until a batch has a point with none."""
    candidates = [baseline(dispatch, pipeline.name, ctx, spec_entry, pinned)]
    search, budget = plan.search, plan.settings.budget
    if len(plan.steps) >= budget:
        return candidates, True
    # A search that does not learn proposes the same whatever it is told: one round will do.
    size = plan.settings.batch_size if search.adaptive else budget

    def from_the_store(batch):
        made = add_candidates(batch, plan.space, dispatch, pipeline, ctx, spec_entry, candidates, pinned)
        note_proposers(made, plan.proposed_by)
        found = {c.id: store.latest(c.key) for _, c in made if c is not None}
        if any(r is None for r in found.values()):
            raise _Unmeasured(len(plan.steps) + len(batch) >= budget or search.exhausted)
        return outcomes(made, found)

    try:
        run_search(search, from_the_store, Budget(budget - len(plan.steps)), size, on_batch=plan.steps.extend)
    except _Unmeasured as unmeasured:
        return candidates, unmeasured.last
    return candidates, True
