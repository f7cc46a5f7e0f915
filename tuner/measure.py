"""Measuring built candidates: numerics against the baseline, timing, recording, and the
confirmation round. Runtime-only (numpy and IREE's runtime tools; no compiler, no z3), so it also
runs on a machine that only received the compiled candidates."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from tuner.errors import ToolError
from tuner.results import EvaluationStats, Result, Status
from tuner.runner import DispatchBenchmark, RunSettings, Timing, benchmark, relative_error, run_once, tolerance
from tuner.tools import ToolRun, kill_running_tools
from tuner.settings import EvalSettings
from tuner.store import ResultStore

# phase ("compile", "benchmark", "confirm"), done, total
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Built:
    """A compiled (or failed) candidate, ready to measure: plain data that can be written into a
    manifest on one machine and measured on another."""

    result: Result  # status so far: OK means it compiled and its config was read back
    vmfb: Optional[Path]
    out_type: str  # element type of the result, for the numerics tolerance
    spec: Optional[Path]  # the candidate's tuning spec file (an empty spec for flag-only configs)
    spec_flag: Optional[str]  # the flag that passes the spec to iree-compile, if it needs one
    base_flags: tuple[str, ...]  # every other flag that builds it
    # Where the target times dispatches alone (GPUs): the dispatch benchmark module to time.
    dispatch_vmfb: Optional[Path] = None
    dispatch_function: Optional[str] = None
    reused: bool = False  # `result` was measured before (in a result store): nothing to build or run

    @property
    def dispatch_benchmark(self) -> Optional[DispatchBenchmark]:
        if self.dispatch_vmfb is None or self.dispatch_function is None:
            return None
        return DispatchBenchmark(self.dispatch_vmfb, self.dispatch_function)

    def rebuild_flags(self, spec_path: Path) -> list[str]:
        """iree-compile flags that rebuild this candidate with its spec at `spec_path`."""
        extra = [f"{self.spec_flag}={spec_path.resolve()}"] if self.spec_flag and self.spec else []
        return [*self.base_flags, *extra]

    def to_json(self, root: Path) -> dict:
        rel = lambda p: str(p.relative_to(root)) if p else None  # noqa: E731
        return {"result": self.result.to_json(), "vmfb": rel(self.vmfb), "out_type": self.out_type,
                "spec": rel(self.spec), "spec_flag": self.spec_flag, "base_flags": list(self.base_flags),
                "dispatch_vmfb": rel(self.dispatch_vmfb), "dispatch_function": self.dispatch_function,
                "reused": self.reused}

    @classmethod
    def from_json(cls, data: dict, root: Path) -> "Built":
        path = lambda p: root / p if p else None  # noqa: E731
        return cls(Result.from_json(data["result"]), path(data["vmfb"]), data["out_type"], path(data["spec"]),
                   data["spec_flag"], tuple(data["base_flags"]), path(data.get("dispatch_vmfb")),
                   data.get("dispatch_function"), data.get("reused", False))


class Measurer:
    """Checks each built candidate's output against the baseline's, then times it. Shared by the
    device workers (thread-safe): the first candidate measured for an executable claims it, and
    any other that compiled to the same executable is a duplicate."""

    def __init__(self, run_settings: RunSettings) -> None:
        self.run_settings = run_settings
        self._lock = threading.Lock()
        self._reference: Optional[np.ndarray] = None
        self._claimed: dict[str, int] = {}  # executable hash -> the candidate measured for it

    def measure(self, b: Built, device: str) -> Result:
        """The candidate's scored result on `device`; the baseline's output becomes the reference
        (measure it first: the others are checked against it)."""
        result = b.result
        if not result.ok:
            return result
        if result.binary_hash:
            with self._lock:
                twin = self._claimed.setdefault(result.binary_hash, result.candidate_id)
            if twin != result.candidate_id:
                # Same executable as one measured already: timing it again would only measure noise.
                return replace(result, status=Status.DUPLICATE, error=f"same executable as candidate {twin}")
        start = time.perf_counter()
        measured, output = self._measure(b, replace(self.run_settings, device=device))
        if b.result.is_baseline and output is not None and measured.ok:
            with self._lock:
                self._reference = output
        return replace(measured, device=device, benchmark_s=time.perf_counter() - start)

    def _measure(self, b: Built, settings: RunSettings) -> tuple[Result, Optional[np.ndarray]]:
        """Run once for the output, check it against the reference, then time it."""
        if b.vmfb is None:
            return replace(b.result, status=Status.RUN_FAILED, error="no compiled module to run"), None
        out_path = b.vmfb.parent / f"output-{settings.device.replace('/', '_').replace(':', '_')}.npy"
        run = run_once(b.vmfb, settings, out_path)
        if not run.ok:
            return _failed_run(b.result, run), None
        output = np.load(out_path)
        with self._lock:
            reference = self._reference
        if reference is None and not b.result.is_baseline:
            return replace(b.result, status=Status.RUN_FAILED, error="no baseline output to check against"), output
        err = 0.0 if reference is None else relative_error(output, reference)
        if err > tolerance(b.out_type):
            return replace(b.result, status=Status.WRONG_NUMERICS, relative_error=err,
                           error=f"relative error {err:.2e} against the baseline exceeds {tolerance(b.out_type):.0e}"), output
        timing, brun = benchmark(b.vmfb, settings, b.dispatch_benchmark)
        if timing is None:
            return replace(_failed_run(b.result, brun), relative_error=err), output
        return replace(b.result, times_ms=list(timing.times_ms), median_ms=timing.median_ms,
                       spread_pct=timing.spread_pct, relative_error=err), output


def _failed_run(result: Result, run: ToolRun) -> Result:
    status = Status.RUN_TIMEOUT if run.timed_out else Status.RUN_FAILED
    error = run.first_error() if not run.timed_out else f"{Path(run.command[0]).name} timed out"
    return replace(result, status=status, error=error, stderr=run.stderr[-4000:])


class Recorder:
    """Where results arrive, in the thread that owns the store: each is stored at once, counted
    for the progress bar, and a failed baseline ends the run (nothing can be checked without it)."""

    def __init__(self, store: ResultStore, total: int, progress: Optional[Progress] = None,
                 phase: str = "benchmark") -> None:
        self.store = store
        self.total = total
        self.progress = progress
        self.phase = phase
        self.results: list[Result] = []

    def add(self, result: Result) -> None:
        self.store.put(result)
        self.results.append(result)
        if self.progress:
            self.progress(self.phase, len(self.results), self.total)
        if result.is_baseline and not result.ok:
            raise ToolError(f"the baseline (the compiler's default) failed: {result.error}", result.command, result.stderr)


def measure_pass(strategy: str, todo: int, reused: list[Result], run: Callable[[Recorder], None],
                 runnable: Callable[[], dict[str, Built]], run_settings: RunSettings, settings: EvalSettings,
                 store: ResultStore, devices: tuple[str, ...],
                 progress: Optional[Progress] = None) -> tuple[list[Result], EvaluationStats]:
    """One evaluation: `run(recorder)` measures the `todo` candidates, recording each result as
    it arrives (an interruption kills every tool still running); then the fastest few, stored
    results in `reused` included, are confirmed. Results come back in candidate order, with
    where the time went."""
    recorder = Recorder(store, todo, progress)
    start = time.perf_counter()
    try:
        run(recorder)
    except BaseException:
        kill_running_tools()  # leave no compile or benchmark running behind an interrupted run
        raise
    wall = time.perf_counter() - start
    start = time.perf_counter()
    results = confirm(recorder.results + reused, runnable(), run_settings, settings, store, progress)
    stats = EvaluationStats.of(strategy, recorder.results, len(reused), wall, time.perf_counter() - start, devices)
    return sorted(results, key=lambda r: r.candidate_id), stats


def confirm(results: list[Result], runnable: dict[str, Built], run_settings: RunSettings, settings: EvalSettings,
            store: ResultStore, progress: Optional[Progress] = None) -> list[Result]:
    """Time the baseline and the `confirm_top` fastest again on one device, round-robin, and pool
    the times (done after every compile has finished, so nothing else competes for the machine)."""
    ok = sorted((r for r in results if r.ok and r.median_ms is not None and r.key in runnable), key=lambda r: r.median_ms)
    chosen = [r for r in ok if r.is_baseline] + [r for r in ok if not r.is_baseline][: settings.confirm_top]
    if len(chosen) < 2 or settings.confirm_rounds < 1:
        return results
    pooled = {r.key: list(r.times_ms) for r in chosen}
    total, done = settings.confirm_rounds * len(chosen), 0
    for round_ in range(settings.confirm_rounds):
        # Rotate the order each round so that no candidate always runs first or last.
        order = chosen[round_ % len(chosen):] + chosen[: round_ % len(chosen)]
        for r in order:
            b = runnable[r.key]
            timing, _ = benchmark(b.vmfb, run_settings, b.dispatch_benchmark)
            if timing is not None:
                pooled[r.key] += timing.times_ms
            done += 1
            if progress:
                progress("confirm", done, total)
    updated = {}
    for r in chosen:
        timing = Timing(tuple(pooled[r.key]))
        updated[r.key] = replace(r, times_ms=list(timing.times_ms), median_ms=timing.median_ms,
                                 spread_pct=timing.spread_pct)
        store.put(updated[r.key])
    return [updated.get(r.key, r) for r in results]
