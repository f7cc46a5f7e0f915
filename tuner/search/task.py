"""`TuneTask`: one dispatch's tuning, in one ask/tell loop whatever runs it (after TVM
MetaSchedule's TuneContext).

A task holds what is tuned (the dispatch, its pipeline, the context and spec entry its candidates
are made in, the other dispatches' configs pinned beside it), the search plan (the space, the
search and, in a model search, its cost model: tuner.search.cost_model), where each batch's
figures come from (a `Measure`) and who hears what happens (`Event`s, given when the task is
made). `run` is the loop (tuner.search.loop.run_search): the search proposes a batch, the task
makes its candidates, the measure gives their results, the search is told each one's first-pass
figure, until the budget or the space is spent.

Two measures:
- `EvaluatorMeasure`: an evaluator (tuner.evaluation.evaluator, or a Ray cluster's) builds and
  times each batch with the baseline beside it, no confirmation rounds; the batch that spends the
  budget is evaluated with every earlier candidate (their figures reused) and confirmed at once.
  `tune` and tune-model's dispatch stage, on this machine or on a cluster.
- `StoredMeasure`: the results the store holds (`benchmark DIR` measured them on the device
  machine). The loop stops at the first batch with a candidate the store has no result for,
  which the `--compile-only` step then compiles: two machines, round by round. Searches are
  deterministic given their seed and what they were told, so each round proposes the batches
  of the rounds before it again, and they are answered from the store."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Protocol, Sequence, Union

from iree.compiler import ir

from pipelines import Dispatch, Pipeline
from tuner.core.results import EvaluationStats, Result
from tuner.core.settings import EvalSettings, SearchSettings
from tuner.evaluation.evaluator import Evaluation, Evaluator
from tuner.search import Budget, Outcome, Proposal, run_search
from tuner.search.live import SearchPlan, add_candidates, note_proposers, outcomes
from tuner.specs.candidates import Candidate, baseline
from tuner.specs.transform import Pinned
from tuner.store import ResultStore


@dataclass(frozen=True)
class CandidateMade:
    """A proposal made into a candidate (`index`: its point in the space)."""

    index: int
    candidate: Candidate


@dataclass(frozen=True)
class BatchMeasured:
    """A batch the measure answered: the points proposed in it (the compiler's own config among
    them needs no build), every result the measure gave, and whether they were confirmed (the
    batch that spends the budget, with every candidate)."""

    proposals: int
    results: tuple[Result, ...]
    confirmed: bool


Event = Union[CandidateMade, BatchMeasured]


@dataclass(frozen=True)
class Measured:
    """What a measure gives for a batch: a result per candidate it measured (or found), what the
    evaluation counted (None where nothing was built or timed), and whether it was confirmed."""

    results: tuple[Result, ...]
    stats: Optional[EvaluationStats] = None
    confirmed: bool = False


class Unmeasured(Exception):
    """A batch holds a candidate the store has no result for: the round ends there (`last`:
    whether that batch is the search's last)."""

    def __init__(self, last: bool) -> None:
        super().__init__("a batch not measured yet")
        self.last = last


class Measure(Protocol):
    """Where a task's figures come from. `budget` is the loop's (a measure that spends no time
    here has no time budget); `batch_size` the batches the search is asked for."""

    def budget(self, settings: SearchSettings) -> Budget: ...

    def batch_size(self, plan: SearchPlan) -> int: ...

    def __call__(self, candidates: Sequence[Candidate], new: Sequence[Candidate], last: bool) -> Measured:
        """The results of `new` (the batch's candidates; `candidates`: every one made so far,
        the baseline first); `last`: the batch spends the budget or the space."""
        ...


@dataclass
class EvaluatorMeasure:
    """Each batch built and timed by `evaluator` beside the baseline, without confirmation
    rounds; the last with every candidate made, confirmed (the evaluator reuses the figures it
    stored). `settings`: the evaluation's."""

    evaluator: Evaluator
    settings: EvalSettings

    def budget(self, settings: SearchSettings) -> Budget:
        return Budget(settings.budget, settings.seconds)

    def batch_size(self, plan: SearchPlan) -> int:
        return plan.settings.batch_size

    def __call__(self, candidates: Sequence[Candidate], new: Sequence[Candidate], last: bool) -> Measured:
        if last:  # confirm now, among all of them: no separate call timing the baseline again
            evaluation = self.evaluator.evaluate(list(candidates), self.settings)
        else:
            evaluation = self.evaluator.evaluate([candidates[0], *new], replace(self.settings, confirm_rounds=0))
        return Measured(evaluation.results, evaluation.stats, confirmed=last)

    def confirm(self, candidates: Sequence[Candidate]) -> Evaluation:
        """Every candidate confirmed against the baseline (a loop stopped by its time budget)."""
        return self.evaluator.evaluate(list(candidates))


@dataclass
class StoredMeasure:
    """The store's latest result of each candidate; Unmeasured at the first batch with one it
    has none for. No time budget: the seconds are spent on two machines. A search that does not
    learn proposes the same whatever it is told: it is asked for its whole budget at once."""

    store: ResultStore

    def budget(self, settings: SearchSettings) -> Budget:
        return Budget(settings.budget)

    def batch_size(self, plan: SearchPlan) -> int:
        return plan.settings.batch_size if plan.search.adaptive else plan.settings.budget

    def __call__(self, candidates: Sequence[Candidate], new: Sequence[Candidate], last: bool) -> Measured:
        found = [self.store.latest(c.key) for c in new]
        if any(r is None for r in found):
            raise Unmeasured(last)
        return Measured(tuple(replace(r, candidate_id=c.id) for c, r in zip(new, found) if r is not None))


@dataclass(frozen=True)
class TaskRun:
    """What a task's loop left: every candidate made (the baseline first), the evaluation that
    confirmed them where the last batch did, what each first-pass batch counted, and whether the
    search is done (its budget or space spent; False where a round stopped at a batch not
    measured yet)."""

    candidates: tuple[Candidate, ...]
    final: Optional[Evaluation]
    first_passes: tuple[EvaluationStats, ...]
    done: bool


@dataclass
class TuneTask:
    """One dispatch's tuning (the module's docstring)."""

    dispatch: Dispatch
    pipeline: Pipeline
    ctx: ir.Context
    spec_entry: str
    plan: SearchPlan
    measure: Measure
    pinned: Pinned = ()  # other dispatches' configs every candidate's spec carries (Target.pinned)
    listeners: tuple[Callable[[Event], None], ...] = ()
    candidates: list[Candidate] = field(init=False)
    results: dict[int, Result] = field(init=False, default_factory=dict)  # candidate id -> latest result

    def __post_init__(self) -> None:
        self.candidates = [baseline(self.dispatch, self.pipeline.name, self.ctx, self.spec_entry, self.pinned)]
        self._final: Optional[Evaluation] = None
        self._first_passes: list[EvaluationStats] = []

    def run(self) -> TaskRun:
        """The loop, from the search's first batch: every batch proposed, its candidates made,
        measured and their figures told to the search (the plan records each step)."""
        plan = self.plan
        done = True
        try:
            run_search(plan.search, self._step, self.measure.budget(plan.settings), self.measure.batch_size(plan),
                       on_batch=plan.steps.extend)
        except Unmeasured as stopped:
            done = stopped.last
        return TaskRun(tuple(self.candidates), self._final, tuple(self._first_passes), done)

    def _step(self, batch: Sequence[Proposal]) -> list[Outcome]:
        made = add_candidates(batch, self.plan.space, self.dispatch, self.pipeline, self.ctx, self.spec_entry,
                              self.candidates, self.pinned)
        note_proposers(made, self.plan.proposed_by)
        new = [c for _, c in made if c is not None]
        for p, c in made:
            if c is not None:
                self._tell(CandidateMade(p.index, c))
        proposed = len(self.plan.steps) + len(batch)  # the plan records each batch once it is told
        last = proposed >= self.plan.settings.budget or proposed >= len(self.plan.space)
        measured = Measured(())
        if new or last:
            measured = self.measure(self.candidates, new, last)
            if measured.confirmed and measured.stats is not None:
                self._final = Evaluation(measured.results, measured.stats)
            elif measured.stats is not None:
                self._first_passes.append(measured.stats)
            self.results.update({r.candidate_id: r for r in measured.results})
        self._tell(BatchMeasured(len(batch), measured.results, measured.confirmed))
        return outcomes(made, self.results)

    def _tell(self, event: Event) -> None:
        for listen in self.listeners:
            listen(event)
