"""The Python API: tune one dispatch of an input file, in one go or as two stages (compile here,
benchmark where the device is)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from iree.compiler import ir

from pipelines import Dispatch, pipeline_for
from tuner.benchmark_stage import benchmark_dir
from tuner.candidates import Candidate, generate_candidates
from tuner.discovery import discover, parse_input, read_workload
from tuner.errors import InputError, OutputError
from tuner.evaluate import EvalSettings, Progress, compile_to_manifest
from tuner.manifest import Manifest
from tuner.ranking import Ranking
from tuner.results import Result
from tuner.targets import Target, parse_target


@dataclass(frozen=True)
class Tuning:
    """What `tune` found: the dispatch, every candidate and result, and their ranking (results
    and ranking are empty after a compile-only run)."""

    dispatch: Dispatch
    candidates: tuple[Candidate, ...]
    manifest: Manifest
    results: tuple[Result, ...]
    ranking: Optional[Ranking]
    output_dir: Path


def prepare_output(output_dir: Path) -> Path:
    """Create the output directory or fail with one clear line."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise OutputError(f"cannot write to output directory {output_dir}: {e.strerror or e}") from None
    return output_dir


def select_dispatch(dispatches: list[Dispatch], name: Optional[str], input_path: Path) -> Dispatch:
    tunable = [d for d in dispatches if pipeline_for(d) is not None]
    if not tunable:
        found = ", ".join(f"{d.op_name} ({d.default.pipeline})" for d in dispatches) or "no root ops"
        raise InputError(f"{input_path}: nothing this tuner can tune on this target (found: {found})")
    if name is None:
        return tunable[0]  # the largest by FLOPs
    for d in tunable:
        if d.name == name:
            return d
    raise InputError(f"{input_path}: no tunable dispatch named {name!r}; tunable: {', '.join(d.name for d in tunable)}")


def tune(input_path: Path | str, target: Target | str = "llvm-cpu", num_candidates: int = 30,
         output_dir: Path | str = "tuning-output", dispatch_name: Optional[str] = None,
         settings: EvalSettings = EvalSettings(), progress: Optional[Progress] = None,
         on_candidates: Optional[Callable[[Dispatch, list[Candidate]], None]] = None,
         compile_only: bool = False) -> Tuning:
    """Discover the dispatch, enumerate candidates, compile and verify them, then (unless
    `compile_only`) measure them and write best_spec.mlir, best_flags.txt and results.json."""
    input_path = Path(input_path)
    target = parse_target(target) if isinstance(target, str) else target
    if num_candidates < 1:
        raise InputError("--num-candidates must be at least 1")
    output_dir = prepare_output(Path(output_dir))
    ctx = ir.Context()
    workload = read_workload(parse_input(input_path, ctx), input_path)
    dispatch = select_dispatch(discover(input_path, target, ctx), dispatch_name, input_path)
    pipeline = pipeline_for(dispatch)
    assert pipeline is not None  # select_dispatch returns tunable dispatches only
    candidates = generate_candidates(dispatch, pipeline, num_candidates, ctx, target.spec_entry)
    if on_candidates:
        on_candidates(dispatch, candidates)
    meta = {
        "input": str(input_path.resolve()),
        "target": target.name,
        "dispatch": dispatch.name,
        "shape": dispatch.shape_name,
        "pipeline": pipeline.name,
        "compiled_on": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    manifest = compile_to_manifest(candidates, input_path, target, workload, output_dir, ctx, settings, meta, progress)
    if compile_only:
        return Tuning(dispatch, tuple(candidates), manifest, (), None, output_dir)
    measured = benchmark_dir(output_dir, None, settings, progress)
    return Tuning(dispatch, tuple(candidates), manifest, measured.results, measured.ranking, output_dir)
