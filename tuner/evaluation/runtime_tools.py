"""IREE's runtime tools on a compiled module: run its entry once for the checked output
(iree-run-module) and time it (iree-benchmark-module), as tool runs with timeouts. The runners
(tuner.evaluation.measure, in_model) time candidates with these. Needs only the IREE runtime and
numpy (no compiler, no z3), so it can run on a machine that only has iree-base-runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from tuner.errors import InputError
from tuner.tools import ToolRun, find_tool, run_tool
from tuner.discovery.raw_types import RAW_TYPES, raw_to_f32
from tuner.core.running import input_flag
from tuner.core.running import DispatchBenchmark, ModuleRun, Timing  # noqa: F401 (theirs)


def module_flag(vmfb: Path) -> tuple[str, Optional[Path]]:
    """`--module=` for a module file, and the directory to run the tool in: the runtime tools
    read `--module=LIBRARY@SYMBOL`, so a path with an `@` in it (an output directory named
    `@out`) opened ''; such a module is named from its own directory."""
    path = Path(vmfb).resolve()
    if "@" not in str(path):
        return f"--module={path}", None
    if "@" in path.name:
        raise InputError(f"{path}: the IREE runtime tools cannot open a module whose file name holds '@'")
    return f"--module={path.name}", path.parent


def _input_flags(inputs: tuple[Path, ...]) -> list[str]:
    return [f"--input={input_flag(p)}" for p in inputs]


def output_file(output: Path, settings: ModuleRun) -> Path:
    """Where run_once writes the checked result asked for at `output`: a .npy file, or for the
    types IREE's .npy writer refuses (bf16, the f8 types) a .bin file of raw bits (the runtime
    tools choose the format by the suffix)."""
    return output.with_suffix(".bin" if settings.checked_type in RAW_TYPES else ".npy")


def run_once(vmfb: Path, settings: ModuleRun, output: Path) -> ToolRun:
    """Run the entry once, saving the checked result to `output_file(output)` (a symbolic link
    there is removed first, never written through)."""
    output = output_file(output, settings)
    if output.is_symlink():
        output.unlink()
    output = output.resolve()
    outputs = [f"--output=@{output}" if i == settings.checked else "--output=" for i in range(settings.outputs)]
    module, cwd = module_flag(vmfb)
    cmd = [find_tool("iree-run-module"), module, f"--device={settings.device}",
           f"--function={settings.entry}", *_input_flags(settings.inputs), *outputs, *settings.runtime_flags]
    return run_tool(cmd, settings.timeout_s, cwd)


def read_output(output: Path, settings: ModuleRun) -> Optional[np.ndarray]:
    """The checked result run_once saved for `output`, as numbers (raw bits widened to f32);
    None if none is checked."""
    if settings.checked is None:
        return None
    path = output_file(output, settings)
    if settings.checked_type in RAW_TYPES:
        return raw_to_f32(np.fromfile(path, dtype=RAW_TYPES[settings.checked_type]), settings.checked_type)
    return np.load(path)


WARMUP_S = 0.05  # the most warm-up a timing gets (the default repetition is 0.1 s)


def benchmark(vmfb: Path, settings: ModuleRun, dispatch: DispatchBenchmark | None = None
              ) -> tuple[Timing | None, ToolRun]:
    """Time with iree-benchmark-module: warm-up, then `repetitions` repetitions. With `dispatch`,
    time the dispatch benchmark module instead, and report milliseconds per dispatch. The warm-up
    lasts as long as a repetition, at most WARMUP_S (Google Benchmark's warm-up phase overshoots:
    0.05 s of it made a call of a small module 0.15-0.2 s where its 0.01 s repetition alone
    made it 0.02 s)."""
    if dispatch is None:
        module, cwd = module_flag(vmfb)
        target = [module, f"--function={settings.entry}", *_input_flags(settings.inputs)]
    else:
        module, cwd = module_flag(dispatch.vmfb)
        target = [module, f"--function={dispatch.function}",
                  f"--batch_size={dispatch.batch}"]
    cmd = [find_tool("iree-benchmark-module"), f"--device={settings.device}", *target,
           f"--benchmark_repetitions={settings.repetitions}",
           f"--benchmark_min_time={settings.min_time_s}s",
           f"--benchmark_min_warmup_time={min(WARMUP_S, settings.min_time_s)}",
           "--benchmark_format=json", *settings.runtime_flags]
    run = run_tool(cmd, settings.timeout_s, cwd)
    if not run.ok:
        return None, run
    try:
        report = json.loads(run.stdout)
        rows = [b for b in report["benchmarks"] if b.get("run_type") == "iteration"]
        if dispatch is None:
            times = tuple(_to_ms(b["real_time"], b.get("time_unit", "ns")) for b in rows)
        else:
            # The tool counts each dispatch of the batch as an item: time per dispatch.
            times = tuple(1e3 / b["items_per_second"] for b in rows)
    except (json.JSONDecodeError, KeyError) as e:
        return None, ToolRun(run.command, 1, run.stdout, f"unreadable benchmark report: {e}\n{run.stderr}", run.seconds)
    return (Timing(times) if times else None), run


def time_one_call(dispatch: DispatchBenchmark, settings: ModuleRun, timeout_s: float) -> tuple[Optional[float], ToolRun]:
    """One call of one dispatch of a dispatch benchmark module, after one warm-up call (no batch),
    killed after `timeout_s`: what a probe of a benchmark that may never finish costs at most.
    The figure is ms for the timed call (None where it failed or ran out of time)."""
    module, cwd = module_flag(dispatch.vmfb)
    cmd = [find_tool("iree-benchmark-module"), f"--device={settings.device}", module, f"--function={dispatch.function}",
           "--batch_size=1", "--benchmark_min_time=1x", "--benchmark_min_warmup_time=0.000001",  # one warm-up call
           "--benchmark_repetitions=1",
           "--benchmark_format=json", *settings.runtime_flags]
    run = run_tool(cmd, timeout_s, cwd)
    if not run.ok:
        return None, run
    try:
        rows = [b for b in json.loads(run.stdout)["benchmarks"] if b.get("run_type") == "iteration"]
        return _to_ms(rows[0]["real_time"], rows[0].get("time_unit", "ns")), run
    except (json.JSONDecodeError, KeyError, IndexError) as e:
        return None, ToolRun(run.command, 1, run.stdout, f"unreadable benchmark report: {e}\n{run.stderr}", run.seconds)


def _to_ms(value: float, unit: str) -> float:
    return value * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def relative_error(output: np.ndarray, reference: np.ndarray) -> float:
    """||out - ref|| / ||ref||, in float64; inf when shapes differ or values are not finite."""
    if output.shape != reference.shape:
        return float("inf")
    out = output.astype(np.float64)
    ref = reference.astype(np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (denom if denom else 1.0))


def tolerance(element_type: str) -> float:
    """How far a re-tiled result may drift from the baseline's (summation order changes)."""
    return {"f64": 1e-9, "f32": 1e-4, "f16": 1e-2, "bf16": 3e-2, "f8E4M3FN": 0.15, "f8E4M3FNUZ": 0.15,
            "f8E5M2": 0.3, "f8E5M2FNUZ": 0.3}.get(element_type, 0.0)
