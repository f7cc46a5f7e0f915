"""Every one-machine evaluation schedule (tuner.strategies) over an in-memory builder, runner and
store: the seams `Builder` and `ModuleRunner` implemented by plain classes, the store
ResultStore.in_memory, no compiler or runtime tool run and no file written by them, so what a schedule does with builds, timings, failures and devices is checked in
milliseconds on designed times (issue 61: no test implemented either seam)."""

import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

from pipelines import pipeline_for
from tuner.core.built import Built
from tuner.core.results import Status
from tuner.core.running import Timing
from tuner.core.settings import EvalSettings
from tuner.discovery.program import discover_program
from tuner.ranking import rank
from tuner.specs.candidates import Candidate, generate_candidates
from tuner.store import ResultStore
from tuner.strategies import STRATEGIES
from tuner.tools import ToolRun
from tests.conftest import write_matmul

SETTINGS = EvalSettings(repetitions=1, min_time_s=0.0, confirm_rounds=2, confirm_top=2, quiet_wait_s=0.0,
                        baseline_every=2)
SCHEDULES = sorted(STRATEGIES)  # every one-machine schedule a user can name with --strategy


class MemoryBuilder:
    """Builds nothing: each candidate lands at once as compiled, with a module path of its own
    (never written), except those in `failing`, which land as a compile error."""

    def __init__(self, root: Path, failing: set[int] = frozenset()):
        self.root, self.failing, self.started = root, failing, []

    def start(self, c: Candidate) -> Future:
        self.started.append(c.id)
        done: Future = Future()
        done.set_result(None)
        return done

    def land(self, c: Candidate, started: Future) -> Built:
        if c.id in self.failing:
            result = c.result([], Status.COMPILE_FAILED, error="error: designed compile failure", compile_s=0.01)
            return Built(result, None, "f32", None, (), ())
        result = c.result([], Status.OK, compile_s=0.01, binary_hash=f"hash-{c.id}")
        return Built(result, self.root / f"{c.id:04d}" / "module.vmfb", "f32", None, (), ())

    def close(self) -> None:
        pass


class MemoryRunner:
    """Times each candidate at its designed milliseconds (by id, 1.0 where not named) and gives
    every one the same output, but those in `wrong`, whose output is off; records where each
    timing ran. A timing takes `delay_s` of wall time (several devices' workers then share the
    work, as real timings make them). Not this machine's devices: never timed in a model."""

    local = False

    def __init__(self, times: dict[int, float], wrong: set[int] = frozenset(), delay_s: float = 0.0):
        self.times, self.wrong, self.timed, self.delay_s = times, wrong, [], delay_s

    @staticmethod
    def _id(b: Built) -> int:
        return b.result.candidate_id

    def identity(self, device: str) -> str:
        return f"memory: {device}"

    def timing_identity(self, device: str, dispatch_only: bool, batch: int) -> str:
        return "memory: entry function"

    def benchmark(self, b: Built, settings) -> tuple:
        self.timed.append((self._id(b), settings.device))
        time.sleep(self.delay_s)
        return Timing((self.times.get(self._id(b), 1.0),)), ToolRun(("memory",), 0, "", "", 0.0)

    def output(self, b: Built, settings) -> tuple:
        out = np.ones((4, 4), np.float32) * (2.0 if self._id(b) in self.wrong else 1.0)
        return ToolRun(("memory",), 0, "", "", 0.0), out


@pytest.fixture(scope="module")
def batch(tmp_path_factory, cpu):
    """A baseline and five configs of a small f32 matmul (discovery reads the compiler's config;
    nothing is built)."""
    from iree.compiler import ir

    ctx = ir.Context()
    path = write_matmul(tmp_path_factory.mktemp("fakes") / "mm.mlir", 64, 64, 64)
    [dispatch] = discover_program(path, cpu, ctx).dispatches
    candidates = generate_candidates(dispatch, pipeline_for(dispatch), 5, ctx)
    assert len(candidates) == 6
    return path, candidates, discover_program(path, cpu, ctx).workload(dispatch, path), ctx


def _evaluate(schedule, batch, tmp_path, cpu, times, devices=("memory://0",), failing=frozenset(),
              wrong=frozenset(), delay_s=0.0):
    path, candidates, workload, ctx = batch
    runner, builder = MemoryRunner(times, wrong, delay_s), MemoryBuilder(tmp_path / "candidates", failing)
    store = ResultStore.in_memory("compiler", "runtime")
    kind = STRATEGIES[schedule]
    evaluator = kind(path, cpu, workload, tmp_path / "candidates", store, SETTINGS, devices, ctx=ctx, runner=runner,
                     builder=builder)
    return evaluator.evaluate(candidates), runner, builder, store


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_schedule_scores_every_candidate_once_and_the_designed_fastest_wins(schedule, batch, tmp_path, cpu):
    # Candidate 3 is 2x the 1.0 ms baseline, 5 is 1.25x, the rest as fast as it.
    evaluation, runner, builder, store = _evaluate(schedule, batch, tmp_path, cpu, {3: 0.5, 5: 0.8})
    assert [r.candidate_id for r in evaluation.results] == list(range(6))
    assert all(r.status == Status.OK for r in evaluation.results), [(r.candidate_id, r.error) for r in evaluation.results]
    assert sorted(builder.started) == list(range(6))  # each built once
    ranking = rank(list(evaluation.results))
    assert ranking.best.candidate_id == 3 and ranking.best.speedup == pytest.approx(2.0)
    # The baseline's output was the first run for it: it is the reference every other is checked against.
    assert runner.timed[0][0] == 0
    assert len(store.reusable([c.key for c in batch[1] if not c.is_baseline], "memory: memory://0",
                              "memory: entry function")) == 5  # every result stored


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_schedule_holds_what_the_driver_reads_of_an_evaluator(schedule, batch, tmp_path, cpu):
    """The Evaluator protocol's attributes (tuner.driver reads them), on every schedule: its
    devices as given, the conditions its runner names for the first, no in-model timing on a
    memory device, and a progress listener the driver may swap."""
    from typing import get_type_hints

    from tuner.evaluation.evaluator import Evaluator

    path, _, workload, ctx = batch
    evaluator = STRATEGIES[schedule](path, cpu, workload, tmp_path / "candidates", ResultStore.in_memory("c", "r"),
                                     SETTINGS, ("memory://0", "memory://1"), ctx=ctx, runner=MemoryRunner({}),
                                     builder=MemoryBuilder(tmp_path / "candidates"))
    assert set(get_type_hints(Evaluator)) == {"name", "devices", "conditions", "in_model", "progress"}
    assert evaluator.name == schedule and evaluator.devices == ("memory://0", "memory://1")
    assert evaluator.conditions == ("memory: memory://0", "memory: entry function")
    assert evaluator.in_model is False and evaluator.progress is None



@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_failed_build_and_a_wrong_output_are_statuses_and_the_others_go_on(schedule, batch, tmp_path, cpu):
    evaluation, runner, _, _ = _evaluate(schedule, batch, tmp_path, cpu, {2: 0.4, 4: 0.5}, failing={2}, wrong={4})
    by_id = {r.candidate_id: r for r in evaluation.results}
    assert by_id[2].status == Status.COMPILE_FAILED and "designed compile failure" in by_id[2].error
    assert by_id[4].status == Status.WRONG_NUMERICS
    assert all(i != 4 for i, _ in runner.timed)  # a wrong result is not timed
    # Faster as designed, yet neither counts; the rest run as fast as the baseline: no winner.
    assert rank(list(evaluation.results)).best is None


def test_the_overlapped_schedule_deals_the_first_pass_over_every_device_and_confirms_on_the_first(batch, tmp_path,
                                                                                                   cpu):
    devices = ("memory://0", "memory://1")
    evaluation, runner, _, _ = _evaluate("overlapped", batch, tmp_path, cpu, {3: 0.5}, devices=devices, delay_s=0.05)
    first_pass = {r.device for r in evaluation.results if not r.is_baseline}
    assert first_pass == set(devices), first_pass
    # Each device times the baseline before its first candidate (its own reference).
    for device in devices:
        on_it = [i for i, d in runner.timed if d == device]
        assert on_it[0] == 0, (device, on_it)
    # The winner's timings after its first are its confirmation rounds: on the first device.
    best = rank(list(evaluation.results)).best
    assert best.candidate_id == 3 and len(best.round_ratios) >= SETTINGS.confirm_rounds
    later = [d for i, d in runner.timed if i == 3][1:]
    assert len(later) >= SETTINGS.confirm_rounds and set(later) == {"memory://0"}, later


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_making_an_evaluator_writes_and_reads_nothing_until_its_first_batch(schedule, batch, tmp_path, cpu):
    """Construction does no I/O (issue 61): the entry's inputs are written, and the host's result
    would be read, when the first batch is measured."""
    path, candidates, workload, ctx = batch
    evaluator = STRATEGIES[schedule](path, cpu, workload, tmp_path / "candidates", ResultStore.in_memory("c", "r"),
                                     SETTINGS, ("memory://0",), ctx=ctx, runner=MemoryRunner({}),
                                     builder=MemoryBuilder(tmp_path / "candidates"),
                                     host_reference=tmp_path / "no-such-host-result.npy")
    assert not (tmp_path / "candidates").exists()
    with pytest.raises(FileNotFoundError):  # read only now, when a batch needs it
        evaluator.evaluate(candidates)
    assert any((tmp_path / "candidates" / "inputs").iterdir())
