"""Builders: candidates in, checked modules (`Built`) out; the build half of an evaluation, the
run half being a ModuleRunner (tuner.evaluation.measure). An evaluator is a schedule over one
of each: `LocalBuilder` compiles on this machine, `tuner.cluster.evaluator.RayBuilder` on a Ray
cluster's compile nodes, and either feeds any runner.

A build has two halves: `start(c)` begins it and returns a future that completes when its
compile has ended (in a worker thread, or on another machine); `land(c, started)` finishes it
in the thread that owns the MLIR context, reading the compiled executables back to check that
the config took effect (or taking a remote build's record as if made here)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Optional, Protocol

from iree.compiler import ir

from tuner.build.compile import compile_candidate, verify_build
from tuner.core.built import Built, Progress
from tuner.core.settings import EvalSettings
from tuner.specs.candidates import Candidate
from tuner.targets import Target
from tuner.tools import kill_running_tools


class Builder(Protocol):
    def start(self, c: Candidate) -> Future: ...

    def land(self, c: Candidate, started: Future) -> Built: ...

    def close(self) -> None:
        """Stop what was started and has not landed (its compiles killed or cancelled)."""


def build_all(builder: "Builder", candidates: list[Candidate], progress: Optional[Progress] = None,
              on_built: Optional[Callable[[Built], None]] = None) -> list[Built]:
    """Every candidate built at once as the builder allows, each landed (checked) in this thread
    as its compile ends and handed to `on_built` then; sorted by candidate id. An interruption
    stops the rest and kills every compile still running."""
    started = {builder.start(c): c for c in candidates}
    built: list[Built] = []
    try:
        for i, future in enumerate(as_completed(started), 1):
            built.append(builder.land(started[future], future))
            if on_built:
                on_built(built[-1])
            if progress:
                progress("compile", i, len(candidates))
    except BaseException:
        builder.close()
        kill_running_tools()  # no compile outlives an interrupted run
        raise
    return sorted(built, key=lambda b: b.result.candidate_id)


class LocalBuilder:
    """Compiles with iree-compile on this machine, `workers` at once, into `workdir`/NNNN.
    `entry`: build the dispatch benchmark of that function too; `in_model`: no dispatch benchmark
    (each candidate timed inside its whole-model module), unless `alone_too`: see compile_candidate."""

    @classmethod
    def of(cls, input_path: Path, target: Target, workdir: Path, ctx: ir.Context,
           settings: EvalSettings = EvalSettings(), **kw) -> "LocalBuilder":
        """One with the compile timeout and workers `settings` give."""
        return cls(input_path, target, workdir, ctx, settings.compile_timeout_s, workers=settings.compile_workers, **kw)

    def __init__(self, input_path: Path, target: Target, workdir: Path, ctx: ir.Context, timeout_s: float,
                 entry: Optional[str] = None, in_model: bool = False, workers: int = 1, alone_too: bool = False
                 ) -> None:
        self.input_path, self.target, self.workdir, self.ctx = input_path, target, workdir, ctx
        self.timeout_s, self.entry, self.in_model, self.alone_too = timeout_s, entry, in_model, alone_too
        self.workers = max(1, workers)
        self._pool: Optional[ThreadPoolExecutor] = None

    def start(self, c: Candidate) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="compile")
        return self._pool.submit(compile_candidate, c, self.input_path, self.target, self.workdir, self.timeout_s,
                                 self.entry, self.in_model, self.alone_too)

    def land(self, c: Candidate, started: Future) -> Built:
        return verify_build(started.result(), self.target, self.ctx)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
