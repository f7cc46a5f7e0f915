"""The TuneTask's one ask/tell loop (tuner.search.task): live, each batch measured by an evaluator (here an
in-memory one with designed figures) and the last confirmed with every candidate; on two
machines, the same search answered from the store, stopping at the first batch it has not
measured. No compiler run: a hand-built dispatch, its candidates' specs built through the bindings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from iree.compiler import ir

from pipelines import pipeline_for
from tests.conftest import synthetic_cpu_dispatch
from tuner.core.results import EvaluationStats, Result, Status
from tuner.core.settings import EvalSettings, SearchSettings
from tuner.evaluation.evaluator import Evaluation
from tuner.search.live import plan_search
from tuner.store import ResultStore
from tuner.search.task import BatchMeasured, CandidateMade, EvaluatorMeasure, StoredMeasure, TuneTask


class DesignedEvaluator:
    """Scores each candidate by a designed figure of its config (so that an adaptive search has
    something to learn), and keeps every call it was given."""

    name = "designed"
    devices = ("memory://0",)
    conditions = ("memory", "designed")
    in_model = False
    progress = None

    def __init__(self, store: ResultStore) -> None:
        self.store = store
        self.calls: list[tuple[list[int], EvalSettings]] = []

    def speedup(self, c) -> float:
        digits = sum(ord(ch) for ch in c.key[:6])
        return 0.5 + (digits % 17) / 10.0

    def evaluate(self, candidates, settings=None) -> Evaluation:
        settings = settings or EvalSettings()
        self.calls.append(([c.id for c in candidates], settings))
        results = []
        for c in candidates:
            s = 1.0 if c.is_baseline else self.speedup(c)
            r = Result(c.id, c.key, c.label, c.is_baseline, dict(c.config.knobs), [], Status.OK, times_ms=[10.0 / s],
                       median_ms=10.0 / s, first_pass_speedup=s, device="memory://0", device_id="memory",
                       timing="designed", binary_hash=c.key)
            self.store.put(r)
            results.append(r)
        return Evaluation(tuple(results), EvaluationStats.of(self.name, results, 0, 0.0, 0.0, self.devices))


@pytest.fixture
def planned():
    dispatch = synthetic_cpu_dispatch(256, 512, 128)
    pipeline = pipeline_for(dispatch)
    settings = SearchSettings(name="model", budget=6, batch_size=2, seed=3)
    return dispatch, pipeline, settings


def _task(planned, measure, listeners=()):
    dispatch, pipeline, settings = planned
    plan = plan_search(dispatch, pipeline, settings)
    return TuneTask(dispatch, pipeline, ir.Context(), "__kernel_config", plan, measure, listeners=listeners), plan


def test_a_live_task_measures_each_batch_beside_the_baseline_and_confirms_the_last_with_every_candidate(planned):
    store = ResultStore.in_memory("c", "r")
    evaluator = DesignedEvaluator(store)
    events = []
    task, plan = _task(planned, EvaluatorMeasure(evaluator, EvalSettings(confirm_rounds=3)), (events.append,))
    ran = task.run()
    ids = [c.id for c in ran.candidates]
    assert ran.done and ids == list(range(len(ids))) and ran.candidates[0].is_baseline
    *first, last = evaluator.calls
    # Each first-pass batch: the baseline and the batch's new candidates, no confirmation rounds.
    assert all(call[0][0] == 0 and call[1].confirm_rounds == 0 for call in first)
    first_new = [i for call in first for i in call[0][1:]]
    assert len(first_new) >= 2 and first_new == ids[1:1 + len(first_new)]
    # The last: every candidate made, at the settings' own confirmation rounds.
    assert last[0] == ids and last[1].confirm_rounds == 3
    assert ran.final is not None and len(ran.first_passes) == len(first)
    made = [e for e in events if isinstance(e, CandidateMade)]
    batches = [e for e in events if isinstance(e, BatchMeasured)]
    assert [e.candidate.id for e in made] == ids[1:]
    assert sum(b.proposals for b in batches) == 6 and [b.confirmed for b in batches] == [False] * 2 + [True]
    # The search was told each point's figure (the designed one), in order.
    told = [s.score for s in plan.steps]
    by_id = {c.id: evaluator.speedup(c) for c in ran.candidates[1:]}
    assert told == [by_id[c.id] for c in ran.candidates[1:]]


def test_the_same_task_answered_from_the_store_proposes_the_same_candidates_and_is_done(planned):
    store = ResultStore.in_memory("c", "r")
    live, live_plan = _task(planned, EvaluatorMeasure(DesignedEvaluator(store), EvalSettings()))
    lived = live.run()
    stored, stored_plan = _task(planned, StoredMeasure(store))
    replayed = stored.run()
    assert [c.key for c in replayed.candidates] == [c.key for c in lived.candidates]
    assert [(s.index, s.score) for s in stored_plan.steps] == [(s.index, s.score) for s in live_plan.steps]
    assert replayed.done and replayed.final is None and replayed.first_passes == ()


def test_a_round_from_the_store_stops_at_the_first_batch_it_has_not_measured(planned):
    full = ResultStore.in_memory("c", "r")
    lived = _task(planned, EvaluatorMeasure(DesignedEvaluator(full), EvalSettings()))[0].run()
    first_batch = lived.candidates[1:3]  # batches of 2; the model search learns from the first
    partial = ResultStore.in_memory("c", "r")
    for c in first_batch:
        partial.put(replace(full.latest(c.key), candidate_id=c.id))
    task, plan = _task(planned, StoredMeasure(partial))
    ran = task.run()
    # The first batch answered and told; the second proposed (to be compiled) but not measured.
    assert [c.key for c in ran.candidates] == [c.key for c in lived.candidates[:5]]
    assert len(plan.steps) == 2 and not ran.done
