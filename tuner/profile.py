"""Where a program's time goes, dispatch by dispatch: each dispatch timed alone (IREE's dumped
dispatch benchmark for its executable, in batches) times how often one call of its entry function
runs it, against the whole entry function timed as the user would call it. The shares are of the
sum of the dispatch times; the check is how close that sum comes to the function's own time (the
rest is what dispatch benchmarks leave out: launches, copies, host work)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from iree.compiler import ir

from tuner.compile_stage import benchmark_function
from tuner.discovery import Program
from tuner.errors import ToolError
from tuner.runner import DispatchBenchmark, RunSettings, benchmark
from tuner.targets import Target
from tuner.tools import find_tool, run_tool
from tuner.workload import Workload

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


# Seen on llvm-cpu with IREE 3.13 (2-core x86_64, AVX-512): the dumped dispatch benchmark of a
# 256x1024x1024 f32 matmul ran in 2.0 ms while the same dispatch inside the program took 7.5-7.9 ms
# (the program compiled with --iree-hal-benchmark-dispatch-repeat-count=10 took 71 ms more than
# with 1). On the H100 the dispatch benchmarks agreed with CUPTI kernel times (BENCHMARKS.md).
CPU_CAVEAT = ("on llvm-cpu, IREE 3.13's dispatch benchmarks run faster than the same dispatch inside the program "
              "(a 256x1024x1024 f32 matmul: 2.0 ms alone, 7.5 ms in the program): the shares are of dispatch-"
              "benchmark time, and the coverage line shows how far their sum is from the function's own time")


@dataclass(frozen=True)
class Profile:
    times: dict[str, DispatchTime]  # by dispatch name; dispatches that could not be timed are absent
    entry_ms: dict[str, float]  # each entry function, timed whole
    untimed: dict[str, str]  # dispatch name -> why it has no time
    caveat: str = ""  # what a reader must know about these times on this target

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


def profile(input_path: Path, target: Target, program: Program, workdir: Path, ctx: ir.Context,
            repetitions: int = 3, timeout_s: float = 300.0,
            progress: Optional[Callable[[str, int, int], None]] = None) -> Profile:
    """Time every dispatch of the program alone and every entry function whole, on the target's
    device, with the compiler's default configs."""
    workdir.mkdir(parents=True, exist_ok=True)
    bench_dir = workdir / BENCH
    vmfb = workdir / "program.vmfb"
    run = run_tool([find_tool("iree-compile"), str(input_path.resolve()), *target.compile_flags,
                    f"--iree-hal-dump-executable-benchmarks-to={bench_dir}", "-o", str(vmfb)], timeout_s)
    if not run.ok:
        raise ToolError(f"iree-compile failed building {input_path} to profile it: {run.first_error()}",
                        list(run.command), run.stderr)
    entries = {w.entry: w for w in program.entries.values() if isinstance(w, Workload)}
    names = sorted(program.runs)
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
    return Profile(times, entry_ms, untimed, CPU_CAVEAT if target.device.startswith("local") else "")
