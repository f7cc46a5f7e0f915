"""Where a program's time goes, dispatch by dispatch: each dispatch's time times how often one
call of its entry function runs it, against the whole entry function timed as the user would call
it. The shares are of the sum of the dispatch times; the check is how close that sum comes to the
function's own time (the rest is launches, copies, host work).

How a dispatch is timed depends on the device. On CUDA where CUPTI loads (the `cuda` extra), inside
the program: the entry called in this process, each dispatch's kernels read from CUPTI's records
(tuner.evaluation.in_model); no dispatch benchmark is dumped or compiled. On the CPU (local-task, local-sync), inside the
program, by the runtime's own HAL profiling (`--device_profiling_mode=host-execution`, read back
with `iree-profile dispatch --format=jsonl`): IREE 3.13's dumped dispatch benchmarks run there
much faster than the same dispatch in the program (a 256x1024x1024 f32 matmul: 2.0 ms alone, 7.1 ms
in the program by the runtime's profile, 7.3 ms per call of the whole function). On GPUs, alone,
from the dumped dispatch benchmark of its executable (in batches; IREE 3.13's CUDA HAL has no
device profiling: "CUDA HAL-native profiling is not implemented"), less the cost of launching
one dispatch in such a batch, timed on a one-element dispatch. That is the fallback: IREE 3.13's
dumped benchmarks of some models' dispatches run for seconds per call (BENCHMARKS.md), so each is
first probed with one call, bounded in time, and abandoned where that call takes longer than the
model's whole call; no benchmark starts after the profile's wall bound; the method says which
dispatches were not timed and why."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

from iree.compiler import ir

from tuner.build.dispatch_benchmark import benchmark_function
from tuner.core.settings import EvalSettings, usable_cores
from tuner.discovery.program import Program
from tuner.errors import ToolError
from tuner.evaluation.in_model import times_in_model, why_not_in_model
from tuner.profiling.timing import DispatchTime, Profile, ProfileJob, time_profile
from tuner.run_dir import fresh, input_digest, real_directory, remove_tree, write_file
from tuner.targets import Target
from tuner.specs.transform import build_spec, uses_codegen_stage
from tuner.tools import find_tool, run_tool_retrying_a_hang
from tuner.versions import compiler_version, runtime_version
from tuner.discovery.workload import Workload

__all__ = ["DispatchTime", "Profile", "ProfileJob", "kept_profile", "prepare_profile", "profile", "time_profile"]

BENCH = "dispatch-benchmarks"
LAUNCH = "launch"  # the one-element dispatch whose batched time is the launch cost
_LAUNCH_PROGRAM = """
func.func @launch(%x: tensor<1xf32>) -> tensor<1xf32> {
  %e = tensor.empty() : tensor<1xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%x : tensor<1xf32>) outs(%e : tensor<1xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<1xf32>
  return %r : tensor<1xf32>
}
"""


def _launch_benchmark(target: Target, workdir: Path, ctx: ir.Context, timeout_s: float) -> Optional[list[str]]:
    """[module, function] of a batched one-element dispatch for the target (None if it does not
    build): what a dispatch benchmark's figure holds besides the kernel itself."""
    src, dump = workdir / f"{LAUNCH}.mlir", workdir / f"{LAUNCH}-bench"
    write_file(src, _LAUNCH_PROGRAM)
    remove_tree(dump)
    run = run_tool_retrying_a_hang([find_tool("iree-compile"), str(src), *target.compile_flags,
                    f"--iree-hal-dump-executable-benchmarks-to={dump}", "-o", str(fresh(workdir / f"{LAUNCH}-program.vmfb"))],
                   timeout_s)
    sources = sorted(dump.glob("*.mlir")) if run.ok else []
    function = benchmark_function(sources[0].read_text(), ctx) if sources else None
    if function is None:
        return None
    module = workdir / f"{LAUNCH}.vmfb"
    built = run_tool_retrying_a_hang([find_tool("iree-compile"), str(sources[0]), *target.compile_flags,
                                      "-o", str(fresh(module))], timeout_s)
    return [str(module.relative_to(workdir)), function] if built.ok else None


def prepare_profile(input_path: Path, target: Target, program: Program, workdir: Path, ctx: ir.Context,
                    repetitions: int = 3, timeout_s: float = 300.0, gpu_timing: str = "auto") -> ProfileJob:
    """Compile the program with its default configs into `workdir` (on GPUs that do not time
    inside the model, with each executable's dispatch benchmark, compiled too), write each
    entry's inputs, and say what to time: the job's paths are relative to `workdir`."""
    real_directory(workdir)
    bench_dir = workdir / BENCH
    vmfb = workdir / "program.vmfb"
    entries = {w.entry: w for w in program.entries.values() if isinstance(w, Workload)}
    mode = ("benchmark_program" if any(w.dispatch_benchmark for w in entries.values())
            else "in_program" if target.device.startswith("local")
            else "in_model" if times_in_model(gpu_timing, target.device) else "alone")  # see the module docstring
    fallback = "" if mode != "alone" else (
        "asked for (--gpu-timing alone)" if gpu_timing == "alone" else
        f"{target.device} has no kernel records here" if not target.device.startswith("cuda") else
        why_not_in_model() or "")
    dump = [f"--iree-hal-dump-executable-benchmarks-to={bench_dir}"] if mode == "alone" else []
    if target.pinned:  # configs without which the model does not build (tuner.stages.repair)
        spec = workdir / "spec.mlir"
        write_file(spec, str(build_spec(list(target.pinned), ctx, target.spec_entry)))
        dump += target.spec_flags(str(spec.resolve()), codegen=uses_codegen_stage([c for _, c in target.pinned]))
    run = run_tool_retrying_a_hang([find_tool("iree-compile"), str(input_path.resolve()), *target.compile_flags, *dump,
                    "-o", str(fresh(vmfb))], timeout_s)
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
        found = {}
        for name in sorted(entry_of):
            source = next((p for p, text in sources.items() if f"@{name}" in text), None)
            function = benchmark_function(sources[source], ctx) if source else None
            if source is None or function is None:
                untimed[name] = "no dispatch benchmark was dumped for it"
            else:
                found[name] = (source, function)

        def build(name: str):
            return run_tool_retrying_a_hang([find_tool("iree-compile"), str(found[name][0]), *target.compile_flags,
                                             "-o", str(fresh(workdir / f"{name}.vmfb"))], timeout_s)

        with ThreadPoolExecutor(max_workers=usable_cores()) as pool:  # each compile a process of its own
            for name, built in zip(found, pool.map(build, found)):
                if built.ok:
                    alone[name] = [f"{name}.vmfb", found[name][1]]
                else:
                    untimed[name] = f"its dispatch benchmark did not compile: {built.first_error()}"
    launch = _launch_benchmark(target, workdir, ctx, timeout_s) if alone else None
    parameters = next((list(w.parameters) for w in entries.values()), [])
    return ProfileJob(target.device, str(vmfb.relative_to(workdir)), inputs, dict(program.runs), entry_of, untimed,
                      mode, alone, repetitions, timeout_s, launch, parameters, fallback)


def profile(input_path: Path, target: Target, program: Program, workdir: Path, ctx: ir.Context,
            timeout_s: float = 300.0, progress: Optional[Callable[[str, int, int], None]] = None,
            gpu_timing: str = "auto") -> Profile:
    """Time every dispatch of the program and every entry function whole, on the target's device,
    with the compiler's default configs (here: prepare_profile, then time_profile; its
    repetitions are prepare_profile's default)."""
    job = prepare_profile(input_path, target, program, workdir, ctx, timeout_s=timeout_s, gpu_timing=gpu_timing)
    return time_profile(job, workdir, progress)


def kept_profile(input_path: Path, target: Target, program: Program, workdir: Path, ctx: ir.Context,
                 settings: EvalSettings = EvalSettings(), progress: Optional[Callable[[str, int, int], None]] = None,
                 say: Callable[[str], None] = lambda _: None) -> Profile:
    """`profile` (under the settings' run timeout and GPU timing), kept beside `workdir`
    (WORKDIR.json) and reused by a rerun of the same program, flags, dispatches, entry calls and
    tools: a resumed model tuning then chooses the same dispatches. Timed again, two dispatches
    of near-equal shares can swap places at a --top cut (ResNet-50 on the H100: a resumed run
    chose the other of two like contractions and tuned it from the start), and profiling a large
    model under its choices again costs a build and its timing."""
    kept, gpu_timing = workdir.with_name(workdir.name + ".json"), settings.gpu_timing
    key = {"program": input_digest(input_path), "target": target.name,
           "flags": list(target.compile_flags), "device": target.device, "gpu_timing": gpu_timing,
           "dispatches": [d.name for d in program.dispatches], "tools": [compiler_version(), runtime_version()],
           # what each entry is called with (--dynamic-size changes it, and the parameters read)
           "entries": sorted(f"{name}: {entry!r}" for name, entry in program.entries.items())}
    try:
        data = json.loads(kept.read_text())
        if data["key"] == key:
            measured = Profile.from_json(data["profile"])
            say(f"profile: reusing what an earlier run measured ({kept}; delete it to measure again)")
            return measured
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none kept, another program's, or unreadable: measured again
    measured = profile(input_path, target, program, workdir, ctx, settings.run_timeout_s, progress, gpu_timing)
    write_file(kept, json.dumps({"key": key, "profile": measured.to_json()}, indent=1))
    return measured
