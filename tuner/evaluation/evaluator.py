"""Evaluators: a batch of candidates in, one scored result per candidate out. Search decides what
to try; an evaluator decides how it is compiled and timed, so a fixed list of configs can be
evaluated without any search and strategies can be compared on the same batch.

Both strategies here share everything but the schedule: stored results are reused, the baseline
is measured first (the reference for every numerics check) and again every few candidates,
every result is stored the moment it arrives, and the most promising few (stored ones included,
built again) are timed side by side with the baseline in interleaved rounds before anything is
ranked (tuner.evaluation.passes.measure_pass).

- `Sequential`: compile one candidate, measure it, then the next. The device idles during every
  compile, and nothing else runs while it measures.
- `Overlapped`: a pool of compile workers (each compile an iree-compile process of its own) feeds
  a queue that benchmark workers, one per device, take from; timing starts as soon as the first
  candidate is built. On a CPU target the compiles share the machine with the timing, which adds
  noise to the first pass; the confirmation round runs after every compile has finished.

- `ray` (tuner.cluster.evaluator): compile tasks and benchmark workers on a Ray cluster.
"""

from __future__ import annotations

import queue
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence, cast

import numpy as np

from iree.compiler import ir

from tuner.specs.candidates import Candidate
from tuner.build.builder import Builder, LocalBuilder
from tuner.build.compile import reused_result
from tuner.evaluation.devices import LOST, MEASURED, DevicePool, distinct_devices
from tuner.errors import InputError
from tuner.evaluation.in_model import IN_MODEL, times_in_model
from tuner.evaluation.measure import LOCAL, Built, Measurer, ModuleRunner, Progress, Recorder
from tuner.evaluation.passes import PassSetup, measure_pass
from tuner.core.results import EvaluationStats, Result
from tuner.core.running import DISPATCH_BATCH, ModuleRun
from tuner.core.settings import EvalSettings
from tuner.store import ResultStore
from tuner.targets import Target
from tuner.discovery.workload import Workload

COMPILED = "compiled"


@dataclass(frozen=True)
class Evaluation:
    results: tuple[Result, ...]  # one per candidate, in candidate order
    stats: EvaluationStats


class Evaluator(Protocol):
    """Compiles and times a batch of candidates (the baseline among them). Besides `evaluate`,
    what the driver (tuner.driver) reads of one: where it times, under which conditions stored
    results are reused, whether it times inside the whole model, and whom it tells its progress
    (the driver swaps that listener for the final confirmation)."""

    name: str
    devices: tuple[str, ...]  # the devices it times on, the first the one it confirms on
    conditions: tuple[str, str]  # (device identity, timing identity) a stored result must have been timed under
    in_model: bool  # each candidate timed by its kernels inside the whole model's call (CUDA with CUPTI)
    progress: Optional[Progress]

    def evaluate(self, candidates: Sequence[Candidate], settings: Optional[EvalSettings] = None) -> Evaluation: ...


class BaseEvaluator:
    """A schedule over a builder (tuner.build.builder: this machine's iree-compile by default)
    and a runner (tuner.evaluation.measure.ModuleRunner: this machine's devices by default, or
    whatever devices it reaches); subclasses choose the schedule, never how a build or a timing
    is done."""

    name = ""

    def __init__(self, input_path: Path, target: Target, workload: Workload, workdir: Path, store: ResultStore,
                 settings: EvalSettings = EvalSettings(), devices: Sequence[str] = (),
                 progress: Optional[Progress] = None, ctx: Optional[ir.Context] = None,
                 given_inputs: Optional[Path] = None, runner: ModuleRunner = LOCAL,
                 host_reference: Optional[Path] = None, builder: Optional[Builder] = None,
                 on_result: Optional[Callable[[Result], None]] = None) -> None:
        self.input_path = input_path
        self.target = target
        self.workload = workload
        self.workdir = workdir
        self.store = store
        self.settings = settings
        self.devices = distinct_devices(devices, target.device)
        self.progress = progress
        self.on_result = on_result  # each first-pass result as it arrives (the CLI streams them)
        self.ctx = ctx or ir.Context()
        self.given_inputs, self.host_reference = given_inputs, host_reference
        self.built: dict[str, Built] = {}  # by candidate key: what this run compiled
        # On a GPU with CUPTI, a candidate is timed by its kernels inside its whole-model module
        # (tuner.evaluation.in_model); elsewhere, or where the runner is not this machine's, as before.
        self.in_model = runner.local and times_in_model(settings.gpu_timing, self.devices[0],
                                                        workload.dispatch_benchmark)
        self.runner = IN_MODEL if self.in_model else runner
        # The build half: this machine's iree-compile unless another builder is given (a cluster's).
        self.builder: Builder = builder or LocalBuilder(
            input_path, target, workdir, self.ctx, settings.compile_timeout_s,
            workload.entry if workload.dispatch_benchmark else None, self.in_model, settings.compile_workers)
        # The conditions stored results must have been timed under to be reused here.
        self.conditions = (self.runner.identity(self.devices[0]),
                           self.runner.timing_identity(self.devices[0],
                                                  target.time_dispatch_only or workload.dispatch_benchmark,
                                                  DISPATCH_BATCH))

    @cached_property
    def module_run(self) -> ModuleRun:
        """How every candidate is run (the entry, its inputs, the first device): the inputs are
        written (or the user's copied) into the run's directory when the first batch needs them,
        not when the evaluator is made."""
        inputs = tuple(self.workload.write_inputs(self.workdir / "inputs", given=self.given_inputs))
        return self.settings.module_run(self.devices[0], self.workload, inputs)

    @cached_property
    def host(self) -> Optional[np.ndarray]:
        """The host's result for these inputs (.npy; tuner.stages.host_reference), or None; read
        when the first batch is measured."""
        return np.load(self.host_reference) if self.host_reference is not None else None

    def evaluate(self, candidates: Sequence[Candidate], settings: Optional[EvalSettings] = None) -> Evaluation:
        """`settings` overrides the evaluator's for this batch (a search's batches skip the
        confirmation round; its last call confirms, reusing what this evaluator built)."""
        settings = settings or self.settings
        if sum(c.is_baseline for c in candidates) != 1:
            raise InputError("a batch needs exactly one baseline candidate")
        stored = self.store.reusable([c.key for c in candidates if not c.is_baseline], *self.conditions)
        reused = [reused_result(c, stored[c.key], self.target, self.workdir) for c in candidates if c.key in stored]
        todo = sorted((c for c in candidates if c.key not in stored), key=lambda c: (not c.is_baseline, c.id))
        try:
            measurer = Measurer(self.module_run, settings.baseline_every, self.runner, self.host)
            results, stats = measure_pass(self.name, len(todo), reused, ScheduledBatch(self, todo, candidates),
                                          PassSetup(measurer, settings, self.store, self.devices, self.progress,
                                                    self.on_result))
        finally:
            self.builder.close()
        return Evaluation(tuple(results), stats)

    def build(self, c: Candidate) -> Built:
        """Build one candidate now."""
        return self._landed(c, self.builder.start(c))

    def _landed(self, c: Candidate, started: Future) -> Built:
        """The builder's build of `c`, remembered: the confirmation rounds time what this run built."""
        built = self.builder.land(c, started)
        self.built[built.result.key] = built
        return built

    def first_pass(self, todo: list[Candidate], measurer: Measurer, recorder: Recorder) -> None:
        """The schedule: build and measure `todo` (the baseline first), recording each result."""
        raise NotImplementedError


class ScheduledBatch:
    """A batch as an evaluator's passes see it (tuner.evaluation.passes.Batch): its first pass
    is the evaluator's schedule over `todo`; what it can run, what the evaluator built; stored
    results chosen for confirmation are built again (only what is timed in this run's rounds
    can win)."""

    def __init__(self, evaluator: BaseEvaluator, todo: list[Candidate], candidates: Sequence[Candidate]) -> None:
        self.evaluator, self.todo = evaluator, todo
        self.by_key = {c.key: c for c in candidates}

    def first_pass(self, measurer: Measurer, recorder: Recorder) -> None:
        self.evaluator.first_pass(self.todo, measurer, recorder)

    def runnable(self) -> dict[str, Built]:
        return {k: b for k, b in self.evaluator.built.items() if b.vmfb is not None}

    def rebuild(self, chosen: list[Result]) -> dict[str, Built]:
        rebuilt = [self.evaluator.build(self.by_key[r.key]) for r in chosen]
        return {b.result.key: b for b in rebuilt if b.result.ok}


class Sequential(BaseEvaluator):
    """Compile, then measure, one candidate at a time, on the first device."""

    name = "sequential"

    def first_pass(self, todo: list[Candidate], measurer: Measurer, recorder: Recorder) -> None:
        for c in todo:
            built = self.build(c)
            recorder.add(measurer.measure(built, self.devices[0]) if built.result.ok else built.result)


class Overlapped(BaseEvaluator):
    """The builder's builds feed benchmark workers (one per device) through a queue as they land."""

    name = "overlapped"

    def first_pass(self, todo: list[Candidate], measurer: Measurer, recorder: Recorder) -> None:
        try:
            # A build lands (its read-back reads MLIR) in this thread, which owns the context.
            self._feed(todo, measurer, recorder, self.builder.start, self._landed)
        finally:
            self.builder.close()

    def _feed(self, todo: list[Candidate], measurer: Measurer, recorder: Recorder,
              start: Callable[[Candidate], "Future"], land: Callable[[Candidate, "Future"], Built]) -> None:
        """Builds started by `start` (futures) feed a pool of benchmark workers, one per device, as
        they finish; `land` turns a finished one into a Built, in this thread. Every result is
        recorded here as it arrives; a device lost mid-run leaves its work to the others."""
        events: "queue.Queue[tuple[str, object]]" = queue.Queue()
        pool = DevicePool(self.devices, measurer, events)
        try:
            for c in todo:  # the baseline first: it is built, and so measured, first
                start(c).add_done_callback(lambda f, c=c: events.put((COMPILED, (c, f))))
            while len(recorder.results) < len(todo):
                kind, payload = events.get()
                if kind == MEASURED:
                    recorder.add(cast(Result, payload))
                elif kind == LOST:
                    pool.lost(cast(str, payload))
                else:
                    built = land(*cast(tuple, payload))
                    if built.result.ok:
                        pool.submit(built)
                    else:
                        recorder.add(built.result)
        finally:
            pool.close()
