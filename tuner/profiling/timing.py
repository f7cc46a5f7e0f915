"""Timing a program's dispatches and entry functions (the runtime half of tuner.profiling.profile): what
to time is a `ProfileJob` (plain data, paths relative to a directory, so it can be written on the
compile machine and timed where the device is), what comes back a `Profile`. Runtime-only."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tuner.errors import ToolError
from tuner.evaluation.in_model import METHOD as IN_MODEL, RUN_ERRORS, KernelCalls, on_device
from tuner.core.running import DispatchBenchmark, ModuleRun
from tuner.evaluation.runtime_tools import benchmark, module_flag, time_one_call
from tuner.tools import find_tool, run_tool
from tuner.core.running import input_flag
from tuner.input.parameters import check_present, runtime_flags

IN_PROGRAM = "each dispatch inside the program, by the runtime's own profile"
ALONE = "each dispatch alone, from IREE's dumped dispatch benchmarks"
LESS_LAUNCH = ", less the launch cost of one batched dispatch ({:.4f} ms)"
BENCHMARK_PROGRAM = "the program is an IREE dispatch benchmark: its dispatch timed alone"
FALLBACK = " (the fallback, bounded: {why})"
# A dispatch benchmark's one call may take this much longer than the model's whole call before it is
# abandoned: a probe call carries its own launch and wait, which the model's call shares out.
PROBE_MARGIN = 1.5


@dataclass(frozen=True)
class DispatchTime:
    name: str
    ms: float  # one run of the dispatch, alone
    runs: int  # per call of its entry function
    entry: str

    @property
    def total_ms(self) -> float:
        return self.ms * self.runs


@dataclass(frozen=True)
class Profile:
    times: dict[str, DispatchTime]  # by dispatch name; dispatches that could not be timed are absent
    entry_ms: dict[str, float]  # each entry function, timed whole
    untimed: dict[str, str]  # dispatch name -> why it has no time
    method: str = ""  # how the dispatches were timed
    # Each entry's command buffers executing, per call, by the runtime's own profile (CPU): the
    # call less its allocations, submission and waits.
    busy_ms: dict[str, float] = field(default_factory=dict)
    # dispatch name -> why its time cannot be trusted (it is then left out of shares and choices)
    untrusted: dict[str, str] = field(default_factory=dict)

    def share(self, name: str) -> Optional[float]:
        """The dispatch's share of the summed dispatch time of its entry function."""
        t = self.times.get(name)
        if t is None:
            return None
        total = sum(x.total_ms for x in self.times.values() if x.entry == t.entry)
        return t.total_ms / total if total else None

    def coverage(self, entry: str) -> Optional[float]:
        """Summed dispatch times of `entry` over its whole time (1.0: the dispatches are all of it)."""
        total = sum(x.total_ms for x in self.times.values() if x.entry == entry)
        return total / self.entry_ms[entry] if self.entry_ms.get(entry) else None

    def to_json(self) -> dict:
        return {"times": {n: t.__dict__ for n, t in self.times.items()}, "entry_ms": self.entry_ms,
                "untimed": self.untimed, "method": self.method, "busy_ms": self.busy_ms, "untrusted": self.untrusted}

    @classmethod
    def from_json(cls, data: dict) -> "Profile":
        return cls({n: DispatchTime(**t) for n, t in data["times"].items()}, data["entry_ms"], data["untimed"],
                   data.get("method", ""), data.get("busy_ms", {}), data.get("untrusted", {}))

    def busy_coverage(self, entry: str) -> Optional[float]:
        """Summed dispatch times of `entry` over the time its command buffers executed (the rest:
        barriers and the task system's hand-offs between dispatches)."""
        total = sum(x.total_ms for x in self.times.values() if x.entry == entry)
        return total / self.busy_ms[entry] if self.busy_ms.get(entry) else None


def _in_program(vmfb: Path, settings: ModuleRun, workdir: Path, timeout_s: float
                ) -> tuple[dict[str, tuple[float, int]], float]:
    """Each dispatch's mean time (ms) inside the program and how many times it ran, and the
    command buffers' summed execution time (ms), from the runtime's own profile of the entry
    function run by iree-benchmark-module (CPU devices: host-execution events)."""
    bundle = workdir / f"{settings.entry}.ireeprof"
    bundle.unlink(missing_ok=True)
    module, cwd = module_flag(vmfb)
    run = run_tool([find_tool("iree-benchmark-module"), f"--device={settings.device}", module,
                    f"--function={settings.entry}", *(f"--input={input_flag(p)}" for p in settings.inputs),
                    f"--benchmark_min_time={settings.min_time_s}s", "--device_profiling_mode=host-execution",
                    f"--device_profiling_output={bundle.resolve()}", *settings.runtime_flags], timeout_s, cwd)
    if not run.ok:
        raise ToolError(f"profiling @{settings.entry} failed: {run.first_error()}", list(run.command), run.stderr)
    times, busy_ns = {}, 0.0
    for view in ("dispatch", "command"):
        report = run_tool([find_tool("iree-profile"), view, "--format=jsonl", str(bundle)], timeout_s)
        if not report.ok:
            raise ToolError(f"iree-profile could not read {bundle}: {report.first_error()}", list(report.command),
                            report.stderr)
        for line in report.stdout.splitlines():
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("type") in ("host_dispatch_group", "dispatch_group") and event.get("valid"):
                times[event["key"]] = (event["avg_ns"] / 1e6, int(event["valid"]))
            elif event.get("type") == "command_host_execution":
                busy_ns += event.get("span_ns", 0)
    return times, busy_ns / 1e6


@dataclass(frozen=True)
class ProfileJob:
    """What to time, with the compiler's default configs: the compiled program, each entry with
    its input files, and how: inside the program (CPU), each dispatch alone from its dumped
    dispatch benchmark (GPUs), or the program as the dispatch benchmark it is."""

    device: str
    module: str  # the compiled program, relative to the job's directory
    inputs: dict[str, list[str]]  # entry -> its input files (relative)
    runs: dict[str, int]  # dispatch -> runs per call of its entry
    entry_of: dict[str, str]  # dispatch -> the entry that runs it
    untimed: dict[str, str]  # dispatch -> why it cannot be timed, known before timing
    mode: str  # "in_program", "in_model", "alone" or "benchmark_program"
    alone: dict[str, list[str]] = field(default_factory=dict)  # dispatch -> [benchmark module, its function]
    repetitions: int = 3
    timeout_s: float = 300.0
    launch: Optional[list[str]] = None  # [module, function]: a one-element dispatch, batched like the others
    parameters: list[str] = field(default_factory=list)  # the model's external parameters, SCOPE=FILE each
    fallback: str = ""  # "alone" on a GPU: why the dispatches are not timed inside the model
    wall_bound_s: float = 120.0  # "alone": no dispatch benchmark is started after this many seconds

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @staticmethod
    def module_of(data: dict) -> str:
        """The compiled program a job's JSON names ("program" in a job written before the field
        was named `module`, read only where no "module" is given)."""
        return data["module"] if "module" in data else data.get("program", "")

    @classmethod
    def from_json(cls, data: dict) -> "ProfileJob":
        data = {**data, "module": cls.module_of(data)}
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def time_profile(job: ProfileJob, root: Path, progress: Optional[Callable[[str, int, int], None]] = None) -> Profile:
    """Time what `job` names (its paths under `root`) on `job.device`."""
    check_present(job.parameters, "the profiled model")
    vmfb = root / job.module
    untimed = dict(job.untimed)
    times: dict[str, DispatchTime] = {}
    entry_ms: dict[str, float] = {}
    busy_ms: dict[str, float] = {}

    def settings(entry: str, min_time_s: float = 0.1) -> ModuleRun:
        return ModuleRun(job.device, entry, tuple(root / p for p in job.inputs[entry]), job.repetitions, min_time_s,
                         job.timeout_s, runtime_flags=runtime_flags(job.parameters))

    if job.mode == "in_model":
        return _time_in_model(job, vmfb, settings, progress)
    if job.mode == "benchmark_program":
        for dispatch, entry in job.entry_of.items():
            timing, run = benchmark(vmfb, settings(entry), DispatchBenchmark(vmfb, entry))
            if timing is None:
                untimed[dispatch] = f"timing it failed: {run.first_error()}"
                continue
            times[dispatch] = DispatchTime(dispatch, timing.median_ms, job.runs[dispatch], entry)
            entry_ms[entry] = timing.median_ms
        return Profile(times, entry_ms, untimed, BENCHMARK_PROGRAM)
    steps = len(job.inputs) + len(job.alone)
    for i, entry in enumerate(sorted(job.inputs), 1):
        whole, _ = benchmark(vmfb, settings(entry, 0.3 if job.mode == "in_program" else 0.1))
        if whole is not None:  # without profiling: what a user's call costs
            entry_ms[entry] = whole.median_ms
        if job.mode == "in_program":
            seen, busy = _in_program(vmfb, settings(entry, 0.3), root, job.timeout_s)
            calls = []
            for dispatch, (ms, count) in seen.items():
                if job.entry_of.get(dispatch) == entry:  # counted under the entry that runs it
                    times[dispatch] = DispatchTime(dispatch, ms, job.runs[dispatch], entry)
                    calls.append(count / job.runs[dispatch])
            if calls and busy:
                busy_ms[entry] = busy / statistics.median(calls)
        if progress:
            progress("profile", i, steps)
    launch_ms, startup_s = 0.0, 1.0
    if job.launch and job.alone:
        module, function = job.launch
        launch = DispatchBenchmark(root / module, function)
        _, probe = time_one_call(launch, settings(next(iter(job.inputs))), job.timeout_s)
        startup_s = probe.seconds if probe.ok else startup_s  # a tool's start and a module's load
        timing, _ = benchmark(root / module, settings(next(iter(job.inputs))), launch)
        launch_ms = timing.median_ms if timing is not None else 0.0
    deadline = time.monotonic() + job.wall_bound_s
    for j, (dispatch, (module, function)) in enumerate(sorted(job.alone.items()), 1):
        entry = job.entry_of[dispatch]
        bench = DispatchBenchmark(root / module, function)
        why = (f"not timed: the profile's bound of {job.wall_bound_s:.0f} s was reached" if time.monotonic() > deadline
               else _abandoned(bench, settings(entry), entry_ms.get(entry), 2 * startup_s + 1.0))
        timing, run = (None, None) if why else benchmark(root / module, settings(entry), bench)
        if why or timing is None:
            untimed[dispatch] = why or f"timing it alone failed: {run.first_error()}"
        else:
            times[dispatch] = DispatchTime(dispatch, max(timing.median_ms - launch_ms, timing.median_ms / 2),
                                           job.runs[dispatch], entry)
        if progress:
            progress("profile", len(job.inputs) + j, steps)
    for dispatch in job.entry_of:
        if dispatch not in times and dispatch not in untimed:
            untimed[dispatch] = "not seen in the runtime's profile of its entry"
    method = IN_PROGRAM if job.mode == "in_program" else ALONE + (LESS_LAUNCH.format(launch_ms) if launch_ms else "") + (
        FALLBACK.format(why=job.fallback) if job.fallback else "")
    untrusted = implausible(times, entry_ms)
    for name in untrusted:
        times.pop(name)
    return Profile(times, entry_ms, {**untimed, **untrusted}, method, busy_ms, untrusted)


def _abandoned(bench: DispatchBenchmark, settings: ModuleRun, whole_ms: Optional[float], timeout_s: float
               ) -> Optional[str]:
    """Why a dispatch benchmark is not timed (None: time it): one call of it, after one call to
    warm it, killed after `timeout_s`, took longer than the model's whole call (IREE 3.13's dumped
    benchmarks of some weight-reading dispatches run for seconds: BENCHMARKS.md)."""
    once, run = time_one_call(bench, settings, timeout_s)
    whole = f"the model's whole call takes {whole_ms:.3f} ms" if whole_ms else "the model's whole call was not timed"
    if run.timed_out:
        return f"abandoned: one call of its dumped benchmark did not finish in {timeout_s:.1f} s ({whole})"
    if once is None:
        return f"timing it alone failed: {run.first_error()}"
    if whole_ms and once > PROBE_MARGIN * whole_ms:
        return f"abandoned: one call of its dumped benchmark took {once:.3f} ms, longer than the model's whole call ({whole_ms:.3f} ms)"
    return None


def _time_in_model(job: ProfileJob, vmfb: Path, settings: Callable[..., ModuleRun],
                   progress: Optional[Callable[[str, int, int], None]]) -> Profile:
    """Each entry called in this process a few times, each dispatch's kernels read from CUPTI's
    records of those calls (tuner.evaluation.in_model): its time per call in the model itself."""
    times: dict[str, DispatchTime] = {}
    entry_ms: dict[str, float] = {}
    untimed = dict(job.untimed)
    for i, entry in enumerate(sorted(job.inputs), 1):
        wanted = sorted(d for d, e in job.entry_of.items() if e == entry)
        run = settings(entry)
        try:
            timing = on_device(job.device, KernelCalls(vmfb, run, tuple(wanted), job.repetitions, 0.3))
        except RUN_ERRORS as e:
            raise ToolError(f"timing @{entry} in this process failed: {type(e).__name__}: {e}") from None
        whole, _ = benchmark(vmfb, run)  # the call as a user times it (the in-process one carries Python's work)
        entry_ms[entry] = whole.median_ms if whole is not None else statistics.median(timing.wall_ms)
        for name in wanted:
            seen = [rep[name] for rep in timing.per_repetition if name in rep]
            if not seen:
                untimed.setdefault(name, f"none of its kernels ran in @{entry}'s call")
                continue
            per_call, runs = statistics.median(k.ms for k in seen), statistics.median(k.runs for k in seen)
            counted = job.runs.get(name, 1) if round(runs) == job.runs.get(name) else max(1, round(runs))
            times[name] = DispatchTime(name, per_call / counted, counted, entry)
        if progress:
            progress("profile", i, len(job.inputs))
    return Profile(times, entry_ms, untimed, IN_MODEL)


def implausible(times: dict[str, DispatchTime], entry_ms: dict[str, float]) -> dict[str, str]:
    """Dispatches whose time cannot be what they take in their entry function: one call of the
    entry runs the dispatch `runs` times and cannot take less than that. (A timing alone that
    went wrong, say a benchmark that did not run as the dispatch runs in the model, is said and
    left out, never used for a share or a choice.)"""
    return {name: (f"its time alone ({t.ms:.3f} ms x {t.runs}) exceeds the whole call of @{t.entry} "
                   f"({entry_ms[t.entry]:.3f} ms): not trusted, left out")
            for name, t in times.items() if entry_ms.get(t.entry) and t.total_ms > entry_ms[t.entry]}
