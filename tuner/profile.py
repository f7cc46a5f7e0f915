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

from pathlib import Path
from typing import Callable, Optional

from iree.compiler import ir

from tuner.dispatch_benchmark import benchmark_function
from tuner.discovery import Program
from tuner.errors import ToolError
from tuner.profile_timing import DispatchTime, Profile, ProfileJob, time_profile
from tuner.targets import Target
from tuner.tools import find_tool, run_tool
from tuner.workload import Workload

__all__ = ["DispatchTime", "Profile", "ProfileJob", "prepare_profile", "profile", "time_profile"]

BENCH = "dispatch-benchmarks"


def prepare_profile(input_path: Path, target: Target, program: Program, workdir: Path, ctx: ir.Context,
                    repetitions: int = 3, timeout_s: float = 300.0) -> ProfileJob:
    """Compile the program with its default configs into `workdir` (on GPUs with each
    executable's dispatch benchmark, compiled too), write each entry's inputs, and say what to
    time: the job's paths are relative to `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    bench_dir = workdir / BENCH
    vmfb = workdir / "program.vmfb"
    entries = {w.entry: w for w in program.entries.values() if isinstance(w, Workload)}
    mode = ("benchmark_program" if any(w.dispatch_benchmark for w in entries.values())
            else "in_program" if target.device.startswith("local") else "alone")  # see the module docstring
    dump = [f"--iree-hal-dump-executable-benchmarks-to={bench_dir}"] if mode == "alone" else []
    run = run_tool([find_tool("iree-compile"), str(input_path.resolve()), *target.compile_flags, *dump,
                    "-o", str(vmfb)], timeout_s)
    if not run.ok:
        raise ToolError(f"iree-compile failed building {input_path} to profile it: {run.first_error()}",
                        list(run.command), run.stderr)
    inputs = {name: [str(p.relative_to(workdir)) for p in w.write_inputs(workdir / "inputs" / name)]
              for name, w in entries.items() if not w.dispatch_benchmark}
    inputs.update({name: [] for name, w in entries.items() if w.dispatch_benchmark})
    entry_of = {d: w.entry for d, w in program.entries.items() if isinstance(w, Workload)}
    untimed = {d: w for d, w in program.entries.items() if isinstance(w, str)}
    alone: dict[str, list[str]] = {}
    if mode == "alone":
        sources = {p: p.read_text() for p in sorted(bench_dir.glob("*.mlir"))}
        for name in sorted(entry_of):
            source = next((p for p, text in sources.items() if f"@{name}" in text), None)
            function = benchmark_function(sources[source], ctx) if source else None
            if source is None or function is None:
                untimed[name] = "no dispatch benchmark was dumped for it"
                continue
            module = workdir / f"{name}.vmfb"
            built = run_tool([find_tool("iree-compile"), str(source), *target.compile_flags, "-o", str(module)],
                             timeout_s)
            if not built.ok:
                untimed[name] = f"its dispatch benchmark did not compile: {built.first_error()}"
                continue
            alone[name] = [str(module.relative_to(workdir)), function]
    return ProfileJob(target.device, str(vmfb.relative_to(workdir)), inputs, dict(program.runs), entry_of, untimed,
                      mode, alone, repetitions, timeout_s)


def profile(input_path: Path, target: Target, program: Program, workdir: Path, ctx: ir.Context,
            repetitions: int = 3, timeout_s: float = 300.0,
            progress: Optional[Callable[[str, int, int], None]] = None) -> Profile:
    """Time every dispatch of the program and every entry function whole, on the target's device,
    with the compiler's default configs (here: prepare_profile, then time_profile)."""
    job = prepare_profile(input_path, target, program, workdir, ctx, repetitions, timeout_s)
    return time_profile(job, workdir, progress)
