"""Where a program's time goes, dispatch by dispatch: each dispatch's time times how often one
call of its entry function runs it, against the whole entry function timed as the user would call
it. The shares are of the sum of the dispatch times; the check is how close that sum comes to the
function's own time (the rest is launches, copies, host work).

How a dispatch is timed depends on the device. On the CPU (local-task, local-sync), inside the
program, by the runtime's own HAL profiling (`--device_profiling_mode=host-execution`, read back
with `iree-profile dispatch --format=jsonl`): IREE 3.13's dumped dispatch benchmarks run there
much faster than the same dispatch in the program (a 256x1024x1024 f32 matmul: 2.0 ms alone, 7.1 ms
in the program by the runtime's profile, 7.3 ms per call of the whole function). On GPUs, alone,
from the dumped dispatch benchmark of its executable (in batches), which agreed with CUPTI kernel
times on the H100."""

from __future__ import annotations

from dataclasses import dataclass, field
import json
import statistics
from pathlib import Path
from typing import Callable, Optional

from iree.compiler import ir

from tuner.compile_stage import benchmark_function
from tuner.discovery import Program
from tuner.errors import ToolError
from tuner.runner import DispatchBenchmark, RunSettings, benchmark
from tuner.targets import Target
from tuner.tools import find_tool, run_tool
from tuner.workload import Workload, input_flag

BENCH = "dispatch-benchmarks"


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
    run = run_tool([find_tool("iree-benchmark-module"), f"--device={settings.device}", f"--module={vmfb}",
                    f"--function={settings.entry}", *(f"--input={input_flag(p)}" for p in settings.inputs),
                    f"--benchmark_min_time={settings.min_time_s}s", "--device_profiling_mode=host-execution",
                    f"--device_profiling_output={bundle}"], timeout_s)
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


def profile(input_path: Path, target: Target, program: Program, workdir: Path, ctx: ir.Context,
            repetitions: int = 3, timeout_s: float = 300.0,
            progress: Optional[Callable[[str, int, int], None]] = None) -> Profile:
    """Time every dispatch of the program alone and every entry function whole, on the target's
    device, with the compiler's default configs."""
    workdir.mkdir(parents=True, exist_ok=True)
    bench_dir = workdir / BENCH
    vmfb = workdir / "program.vmfb"
    in_program = target.device.startswith("local")  # see the module docstring
    dump = [] if in_program else [f"--iree-hal-dump-executable-benchmarks-to={bench_dir}"]
    run = run_tool([find_tool("iree-compile"), str(input_path.resolve()), *target.compile_flags, *dump,
                    "-o", str(vmfb)], timeout_s)
    if not run.ok:
        raise ToolError(f"iree-compile failed building {input_path} to profile it: {run.first_error()}",
                        list(run.command), run.stderr)
    entries = {w.entry: w for w in program.entries.values() if isinstance(w, Workload)}
    names = sorted(program.runs)
    if any(w.dispatch_benchmark for w in entries.values()):
        return _profile_dispatch_benchmark(vmfb, target, program, entries, repetitions, timeout_s)
    if in_program:
        return _profile_in_program(vmfb, target, program, entries, workdir, repetitions, timeout_s, progress)
    times, untimed = {}, {}
    sources = {p: p.read_text() for p in sorted(bench_dir.glob("*.mlir"))}
    total = len(names) + len(entries)
    for i, name in enumerate(names, 1):
        entry = program.entries.get(name)
        source = next((p for p, text in sources.items() if f"@{name}" in text), None)
        function = benchmark_function(sources[source], ctx) if source else None
        if isinstance(entry, str) or entry is None or source is None or function is None:
            untimed[name] = entry if isinstance(entry, str) else "no dispatch benchmark was dumped for it"
        else:
            module = workdir / f"{name}.vmfb"
            built = run_tool([find_tool("iree-compile"), str(source), *target.compile_flags, "-o", str(module)], timeout_s)
            timing, brun = (benchmark(module, RunSettings(target.device, entry.entry, (), repetitions, 0.1, timeout_s),
                                      DispatchBenchmark(module, function)) if built.ok else (None, built))
            if timing is None:
                untimed[name] = f"timing it alone failed: {brun.first_error()}"
            else:
                times[name] = DispatchTime(name, timing.median_ms, program.runs[name], entry.entry)
        if progress:
            progress("profile", i, total)
    entry_ms = {}
    for j, (name, workload) in enumerate(sorted(entries.items()), 1):
        inputs = tuple(workload.write_inputs(workdir / "inputs" / name))
        timing, _ = benchmark(vmfb, RunSettings(target.device, name, inputs, repetitions, 0.1, timeout_s))
        if timing is not None:
            entry_ms[name] = timing.median_ms
        if progress:
            progress("profile", len(names) + j, total)
    return Profile(times, entry_ms, untimed, "each dispatch alone, from IREE's dumped dispatch benchmarks")


def _profile_dispatch_benchmark(vmfb: Path, target: Target, program: Program, entries: dict[str, Workload],
                                repetitions: int, timeout_s: float) -> Profile:
    """An IREE dispatch benchmark program: its function is the dispatch, timed alone in batches
    (the runtime's benchmark tool takes a batch size for it, no inputs)."""
    times, entry_ms, untimed = {}, {}, {}
    for dispatch, entry in program.entries.items():
        if isinstance(entry, str):
            untimed[dispatch] = entry
            continue
        timing, run = benchmark(vmfb, RunSettings(target.device, entry.entry, (), repetitions, 0.1, timeout_s),
                                DispatchBenchmark(vmfb, entry.entry))
        if timing is None:
            untimed[dispatch] = f"timing it failed: {run.first_error()}"
            continue
        times[dispatch] = DispatchTime(dispatch, timing.median_ms, program.runs[dispatch], entry.entry)
        entry_ms[entry.entry] = timing.median_ms
    return Profile(times, entry_ms, untimed, "the program is an IREE dispatch benchmark: its dispatch timed alone")


def _profile_in_program(vmfb: Path, target: Target, program: Program, entries: dict[str, Workload], workdir: Path,
                        repetitions: int, timeout_s: float,
                        progress: Optional[Callable[[str, int, int], None]]) -> Profile:
    times: dict[str, DispatchTime] = {}
    entry_ms: dict[str, float] = {}
    busy_ms: dict[str, float] = {}
    for i, (name, workload) in enumerate(sorted(entries.items()), 1):
        settings = RunSettings(target.device, name, tuple(workload.write_inputs(workdir / "inputs" / name)),
                               repetitions, 0.3, timeout_s)
        whole, _ = benchmark(vmfb, settings)  # without profiling: what a user's call costs
        if whole is not None:
            entry_ms[name] = whole.median_ms
        seen, busy = _in_program(vmfb, settings, workdir, timeout_s)
        calls = []
        for dispatch, (ms, count) in seen.items():
            entry = program.entries.get(dispatch)
            if isinstance(entry, Workload) and entry.entry == name:  # counted under the entry that runs it
                times[dispatch] = DispatchTime(dispatch, ms, program.runs[dispatch], name)
                calls.append(count / program.runs[dispatch])
        if calls and busy:
            busy_ms[name] = busy / statistics.median(calls)
        if progress:
            progress("profile", i, len(entries))
    untimed = {d: (e if isinstance(e, str) else "not seen in the runtime's profile of its entry")
               for d, e in program.entries.items() if d not in times}
    return Profile(times, entry_ms, untimed, "each dispatch inside the program, by the runtime's own profile",
                   busy_ms)
