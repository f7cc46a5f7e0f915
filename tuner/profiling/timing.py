"""Timing a program's dispatches and entry functions (the runtime half of tuner.profiling.profile): what
to time is a `ProfileJob` (plain data, paths relative to a directory, so it can be written on the
compile machine and timed where the device is), what comes back a `Profile`. Runtime-only."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tuner.errors import ToolError
from tuner.evaluation.runner import DispatchBenchmark, RunSettings, benchmark, module_flag
from tuner.tools import find_tool, run_tool
from tuner.discovery.workload import input_flag
from tuner.input.parameters import check_present, runtime_flags

IN_PROGRAM = "each dispatch inside the program, by the runtime's own profile"
ALONE = "each dispatch alone, from IREE's dumped dispatch benchmarks"
LESS_LAUNCH = ", less the launch cost of one batched dispatch ({:.4f} ms)"
BENCHMARK_PROGRAM = "the program is an IREE dispatch benchmark: its dispatch timed alone"


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


def _in_program(vmfb: Path, settings: RunSettings, workdir: Path, timeout_s: float
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
    program: str  # the compiled program, relative to the job's directory
    inputs: dict[str, list[str]]  # entry -> its input files (relative)
    runs: dict[str, int]  # dispatch -> runs per call of its entry
    entry_of: dict[str, str]  # dispatch -> the entry that runs it
    untimed: dict[str, str]  # dispatch -> why it cannot be timed, known before timing
    mode: str  # "in_program", "alone" or "benchmark_program"
    alone: dict[str, list[str]] = field(default_factory=dict)  # dispatch -> [benchmark module, its function]
    repetitions: int = 3
    timeout_s: float = 300.0
    launch: Optional[list[str]] = None  # [module, function]: a one-element dispatch, batched like the others
    parameters: list[str] = field(default_factory=list)  # the model's external parameters, SCOPE=FILE each

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict) -> "ProfileJob":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def time_profile(job: ProfileJob, root: Path, progress: Optional[Callable[[str, int, int], None]] = None) -> Profile:
    """Time what `job` names (its paths under `root`) on `job.device`."""
    check_present(job.parameters, "the profiled model")
    vmfb = root / job.program
    untimed = dict(job.untimed)
    times: dict[str, DispatchTime] = {}
    entry_ms: dict[str, float] = {}
    busy_ms: dict[str, float] = {}

    def settings(entry: str, min_time_s: float = 0.1) -> RunSettings:
        return RunSettings(job.device, entry, tuple(root / p for p in job.inputs[entry]), job.repetitions, min_time_s,
                           job.timeout_s, runtime_flags=runtime_flags(job.parameters))

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
    launch_ms = 0.0
    if job.launch and job.alone:
        module, function = job.launch
        timing, _ = benchmark(root / module, settings(next(iter(job.inputs))), DispatchBenchmark(root / module, function))
        launch_ms = timing.median_ms if timing is not None else 0.0
    for j, (dispatch, (module, function)) in enumerate(sorted(job.alone.items()), 1):
        entry = job.entry_of[dispatch]
        timing, run = benchmark(root / module, settings(entry), DispatchBenchmark(root / module, function))
        if timing is None:
            untimed[dispatch] = f"timing it alone failed: {run.first_error()}"
        else:
            times[dispatch] = DispatchTime(dispatch, max(timing.median_ms - launch_ms, timing.median_ms / 2),
                                           job.runs[dispatch], entry)
        if progress:
            progress("profile", len(job.inputs) + j, steps)
    for dispatch in job.entry_of:
        if dispatch not in times and dispatch not in untimed:
            untimed[dispatch] = "not seen in the runtime's profile of its entry"
    method = IN_PROGRAM if job.mode == "in_program" else ALONE + (LESS_LAUNCH.format(launch_ms) if launch_ms else "")
    untrusted = implausible(times, entry_ms)
    for name in untrusted:
        times.pop(name)
    return Profile(times, entry_ms, {**untimed, **untrusted}, method, busy_ms, untrusted)


def implausible(times: dict[str, DispatchTime], entry_ms: dict[str, float]) -> dict[str, str]:
    """Dispatches whose time cannot be what they take in their entry function: one call of the
    entry runs the dispatch `runs` times and cannot take less than that. (A timing alone that
    went wrong, say a benchmark that did not run as the dispatch runs in the model, is said and
    left out, never used for a share or a choice.)"""
    return {name: (f"its time alone ({t.ms:.3f} ms x {t.runs}) exceeds the whole call of @{t.entry} "
                   f"({entry_ms[t.entry]:.3f} ms): not trusted, left out")
            for name, t in times.items() if entry_ms.get(t.entry) and t.total_ms > entry_ms[t.entry]}
