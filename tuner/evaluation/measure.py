"""Measuring built candidates: numerics against the baseline, timing, recording (the passes that
use these, first pass to confirmation: tuner.evaluation.passes). Runtime-only (numpy and IREE's runtime tools; no compiler, no z3), so it also
runs on a machine that only received the compiled candidates."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Protocol

import numpy as np

from tuner.core.comparison import BaselineTiming, nearest_baseline
from tuner.evaluation.device_identity import device_identity, timing_identity
from tuner.errors import ToolError, UnusableBaseline
from tuner.core.results import Result, Status
from tuner.evaluation.runtime_tools import (ModuleRun, Timing, benchmark, read_output, relative_error, run_once,
                          tolerance)
from tuner.tools import ToolRun
from tuner.store import ResultStore

from tuner.core.built import Built, Progress  # noqa: F401 (the measured record; theirs)


class DeviceLost(Exception):
    """A device went away mid-run (a remote benchmark worker died): what it was given is measured
    elsewhere, and it gets nothing more."""

    def __init__(self, device: str, why: str) -> None:
        super().__init__(f"{device}: {why}")
        self.device = device


class ModuleRunner(Protocol):
    """How a built candidate is run and timed on a named device: on this machine's devices
    (`LocalRunner`), or on a cluster's benchmark workers (tuner.cluster). May raise DeviceLost."""

    # Whether it runs modules on this machine's own devices: only such a runner's devices can
    # time a candidate inside the whole model by CUPTI (tuner.evaluation.in_model).
    local: bool

    def identity(self, device: str) -> str:
        """The device's identity (tuner.evaluation.device_identity): part of every stored timing's key."""

    def timing_identity(self, device: str, dispatch_only: bool, batch: int) -> str:
        """What a time taken there is a time of (tuner.evaluation.device_identity.timing_identity)."""

    def benchmark(self, b: Built, settings: ModuleRun) -> tuple[Optional[Timing], ToolRun]:
        """One timing of `b` (its dispatch benchmark where it has one) under `settings`."""

    def output(self, b: Built, settings: ModuleRun) -> tuple[ToolRun, Optional[np.ndarray]]:
        """Run `b`'s entry once; its checked result (None where none is checked)."""


class LocalRunner:
    """Runs modules where they lie, on this machine's devices, with IREE's runtime tools."""

    local = True

    def identity(self, device: str) -> str:
        return device_identity(device)

    def timing_identity(self, device: str, dispatch_only: bool, batch: int) -> str:
        return timing_identity(device, dispatch_only, batch)

    def benchmark(self, b: Built, settings: ModuleRun) -> tuple[Optional[Timing], ToolRun]:
        return benchmark(b.vmfb, settings, b.dispatch_benchmark)

    def output(self, b: Built, settings: ModuleRun) -> tuple[ToolRun, Optional[np.ndarray]]:
        out_path = b.vmfb.parent / f"output-{settings.device.replace('/', '_').replace(':', '_')}.npy"
        run = run_once(b.vmfb, settings, out_path)
        return run, (read_output(out_path, settings) if run.ok else None)


LOCAL = LocalRunner()


# A candidate's run or timing is stopped after this many times the baseline's own (its slowest
# tool run), and never before CANDIDATE_FLOOR_S, where that is under the run's timeout: a
# candidate of the held-out UNet block (an elementwise dispatch, 1% of its time) ran past
# iree-run-module's 120 s timeout on the H100 where the baseline's run took seconds, and a batch of
# eight such would have held the dispatch stage 16 minutes.
CANDIDATE_FACTOR = 20
CANDIDATE_FLOOR_S = 30.0


# How far a GPU build's result may be from the host's (llvm-cpu) for the same program, as a
# multiple of the element type's tolerance: the two backends sum in different orders and
# precisions throughout the model, not in one dispatch (tuner.stages.model_timing uses the same).
HOST_SLACK = 10


class Measurer:
    """Checks each built candidate's output against the baseline's, then times it. Shared by the
    device workers (thread-safe): the first candidate measured for an executable claims it, and
    any other that compiled to the same executable is a duplicate.

    It also keeps the baseline's timeline: each device times the baseline before its first
    candidate and again after every `baseline_every` candidates, so that every first-pass time
    has a baseline time taken near it on the same device, and a drift shows where it happened."""

    def __init__(self, module_run: ModuleRun, baseline_every: int = 5, runner: ModuleRunner = LOCAL,
                 host: Optional[np.ndarray] = None) -> None:
        self.module_run = module_run
        # The same program's result on the host (llvm-cpu; tuner.stages.host_reference), or None.
        # Where the baseline's result is off it (or not finite), candidates are checked against it.
        self.host = host
        self.baseline_every = max(1, baseline_every)
        self.runner = runner
        self.lost: dict[str, str] = {}  # devices that went away mid-run (DeviceLost), with why: nothing more is timed there
        self._lock = threading.Lock()
        self._reference: Optional[np.ndarray] = None
        self._baseline: Optional[Built] = None
        self._claimed: dict[str, int] = {}  # executable hash -> the candidate measured for it
        self.log: list[BaselineTiming] = []  # every timing of the baseline, on every device
        self._since: dict[str, int] = {}  # per device: candidates timed since its last baseline timing
        self._baseline_s = 0.0  # the baseline's slowest tool run (its output run, its timings)

    def settings(self, device: str) -> ModuleRun:
        return replace(self.module_run, device=device)

    def candidate_settings(self, device: str) -> ModuleRun:
        """A candidate's settings on `device`: its tool runs stopped after CANDIDATE_FACTOR times
        the baseline's slowest (not before CANDIDATE_FLOOR_S), once the baseline has run."""
        settings = self.settings(device)
        with self._lock:
            baseline_s = self._baseline_s
        if baseline_s <= 0:
            return settings
        return replace(settings, timeout_s=min(settings.timeout_s, max(CANDIDATE_FLOOR_S, CANDIDATE_FACTOR * baseline_s)))

    def _note_baseline(self, b: Built, run: ToolRun) -> None:
        if b.result.is_baseline and run.ok:
            with self._lock:
                self._baseline_s = max(self._baseline_s, run.seconds)

    def identity(self, b: Built, device: str) -> dict:
        """The conditions a timing of `b` on `device` is taken under (see tuner.evaluation.device_identity)."""
        bench = b.dispatch_benchmark
        return {"device": device, "device_id": self.runner.identity(device),
                "timing": self.runner.timing_identity(device, bench is not None, bench.batch if bench else 0)}

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
        if not result.is_baseline and device not in self._since:
            self.time_baseline(device)  # this device's first reference
        start = time.perf_counter()
        measured, output = self._measure(b, self.settings(device) if result.is_baseline else self.candidate_settings(device))
        measured = replace(measured, benchmark_s=time.perf_counter() - start, timed_at=time.time(),
                           **self.identity(b, device))
        if result.is_baseline and measured.ok:
            with self._lock:
                self._reference, self._baseline = output, b
                self._since[device] = 0
                self.log.append(BaselineTiming(device, measured.timed_at, measured.median_ms, measured.spread_pct))
        elif measured.ok:
            self._counted(device)
        return measured

    def retime(self, r: Result, b: Built) -> Result:
        """Time a measured candidate once more on the device that measured it (its numerics were
        checked already), as the first pass would, baseline timings included."""
        timed = self._timed(r, b, self.candidate_settings(r.device))
        if timed.ok:
            self._counted(r.device)
        return replace(timed, timed_at=time.time(), retimed=True)

    def _counted(self, device: str) -> None:
        with self._lock:
            self._since[device] = self._since.get(device, 0) + 1
            due = self._since[device] >= self.baseline_every
        if due:
            self.time_baseline(device)

    def timing(self, b: Built, device: str) -> tuple[Optional[Timing], ToolRun]:
        """One timing of `b` on `device`."""
        return self._guarded(lambda: self.runner.benchmark(b, self.settings(device)))

    def _guarded(self, call):
        """`call()` (a runner call); a device lost on the way is remembered as lost, then raised on."""
        try:
            return call()
        except DeviceLost as e:
            self.lose(e)
            raise

    def lose(self, lost: DeviceLost) -> None:
        with self._lock:
            self.lost.setdefault(lost.device, str(lost))
            self._since.pop(lost.device, None)

    def confirm_device(self) -> Optional[str]:
        """Where the confirmation rounds run: the first device, or another if it was lost."""
        with self._lock:
            candidates = [self.module_run.device, *sorted(self._since)]
        return next((d for d in candidates if d not in self.lost), None)

    def time_baseline(self, device: str) -> None:
        """Time the baseline on `device` now and add it to the timeline (a failed timing adds
        nothing: the nearest other one serves; nor does a lost device)."""
        with self._lock:
            baseline = self._baseline
            if device in self.lost:
                return
            self._since[device] = 0
        if baseline is None:
            return
        try:
            timing, _ = self.timing(baseline, device)
        except DeviceLost:
            return
        if timing is not None:
            with self._lock:
                self.log.append(BaselineTiming(device, time.time(), timing.median_ms, timing.spread_pct))

    def close_timeline(self) -> None:
        """Time the baseline once more on each device that timed candidates since its last
        baseline timing, so that the last span of the pass is bracketed too."""
        with self._lock:
            open_devices = [d for d, n in self._since.items() if n > 0]
        for device in open_devices:
            self.time_baseline(device)

    def _measure(self, b: Built, settings: ModuleRun) -> tuple[Result, Optional[np.ndarray]]:
        """Run once for the output, check it against the reference, then time it."""
        if settings.checked is None and b.dispatch_benchmark is not None:
            return self._timed(b.result, b, settings), None  # nothing to compare: the dispatch alone is timed
        if b.vmfb is None:
            return replace(b.result, status=Status.RUN_FAILED, error="no compiled module to run"), None
        run, output = self._output(b, settings)
        if not run.ok:
            return _failed_run(b.result, run), None
        if output is None:  # nothing to compare (no tensor result): timed, numerics unchecked
            return self._timed(b.result, b, settings), None
        if b.result.is_baseline and self.host is not None:
            return self._against_host(b, settings, output)
        if b.result.is_baseline and not np.all(np.isfinite(output)):
            return replace(b.result, status=Status.WRONG_NUMERICS, error=(
                f"its result holds {np.count_nonzero(~np.isfinite(output))} values that are not finite (NaN or "
                f"inf) of {output.size}: no candidate's numerics can be checked against it; give inputs whose "
                f"result is finite")), output
        with self._lock:
            reference = self._reference
        if reference is None and not b.result.is_baseline:
            return replace(b.result, status=Status.RUN_FAILED, error="no baseline output to check against"), output
        err = 0.0 if reference is None else relative_error(output, reference)
        against_host = reference is not None and reference is self.host
        allowed = tolerance(_checked_type(b, settings)) * (HOST_SLACK if against_host else 1)
        if not err <= allowed:
            return replace(b.result, status=Status.WRONG_NUMERICS, relative_error=err, error=(
                f"relative error {err:.2e} against {'llvm-cpu' if against_host else 'the baseline'}'s result "
                f"exceeds {allowed:.0e}")), output
        return self._timed(replace(b.result, relative_error=err), b, settings), output

    def _against_host(self, b: Built, settings: ModuleRun, output: np.ndarray) -> tuple[Result, np.ndarray]:
        """The baseline checked against the host's result: where it agrees, its own output is the
        reference as usual; where it is off it or not finite, the host's result is, and the
        baseline is still timed (it is what the candidates are timed against), its error said."""
        off = relative_error(output, self.host) if np.all(np.isfinite(output)) else float("inf")
        if off <= tolerance(_checked_type(b, settings)) * HOST_SLACK:
            return self._timed(b.result, b, settings), output
        timed = self._timed(replace(b.result, relative_error=off), b, settings)
        if timed.ok:
            timed = replace(timed, error=f"its result is off llvm-cpu's on this host (relative error {off:.2g}): "
                                         "every candidate is checked against llvm-cpu's")
        return timed, self.host

    def _output(self, b: Built, settings: ModuleRun) -> tuple[ToolRun, Optional[np.ndarray]]:
        run, output = self._guarded(lambda: self.runner.output(b, settings))
        self._note_baseline(b, run)
        return run, output

    def _timed(self, result: Result, b: Built, settings: ModuleRun) -> Result:
        """`result` with the times of one timing of `b` under `settings`, or the failure of it."""
        timing, run = self._guarded(lambda: self.runner.benchmark(b, settings))
        self._note_baseline(b, run)
        if timing is None:
            return _failed_run(result, run)
        return replace(result, times_ms=list(timing.times_ms), median_ms=timing.median_ms,
                       spread_pct=timing.spread_pct)


def _checked_type(b: Built, settings: ModuleRun) -> str:
    """The element type of the result that is compared: the checked output's (a model's f16
    result, where the tuned matmul's own is f32), else the dispatch's."""
    return settings.checked_type or b.out_type


def _failed_run(result: Result, run: ToolRun) -> Result:
    status = Status.RUN_TIMEOUT if run.timed_out else Status.RUN_FAILED
    error = run.first_error() if not run.timed_out else f"{Path(run.command[0]).name} timed out"
    return replace(result, status=status, error=error, stderr=run.stderr[-4000:])


class Recorder:
    """Where results arrive, in the thread that owns the store: each is stored at once, with a
    first-pass figure against the nearest baseline timing taken so far on its device (`log`; made
    final at the end of the pass), so that a run killed mid-pass leaves every stored result able
    to compete in the next run's confirmation; counted for the progress bar; a failed baseline
    ends the run (nothing can be checked without it)."""

    def __init__(self, store: ResultStore, total: int, progress: Optional[Progress] = None,
                 phase: str = "benchmark", log: Optional[list[BaselineTiming]] = None,
                 on_result: Optional[Callable[[Result], None]] = None) -> None:
        self.store = store
        self.on_result = on_result
        self.total = total
        self.progress = progress
        self.phase = phase
        self.log = log
        self.results: list[Result] = []

    def add(self, result: Result) -> None:
        if self.log is not None:
            result = first_pass_speedup(result, list(self.log))
        self.store.put(result)
        self.results.append(result)
        if self.on_result:  # before the count: in a log, the candidate's line before its phase's "done"
            self.on_result(result)
        if self.progress:
            self.progress(self.phase, len(self.results), self.total)
        if result.is_baseline and result.status == Status.WRONG_NUMERICS:
            raise UnusableBaseline(f"the baseline (the compiler's default) cannot serve as the reference: {result.error}")
        if result.is_baseline and not result.ok:
            raise ToolError(f"the baseline (the compiler's default) failed: {result.error}", result.command, result.stderr)


def first_pass_speedup(r: Result, log: list[BaselineTiming]) -> Result:
    """The result with its first-pass figure: the baseline timing nearest to it on its device,
    over its median."""
    if not r.ok or r.median_ms is None or r.timed_at is None:
        return r
    if r.is_baseline:
        return replace(r, baseline_ms=r.median_ms, first_pass_speedup=1.0)
    nearest = nearest_baseline(log, r.device, r.timed_at)
    if nearest is None:
        return r
    return replace(r, baseline_ms=nearest.median_ms, first_pass_speedup=nearest.median_ms / r.median_ms)
