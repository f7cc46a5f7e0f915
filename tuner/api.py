"""The Python API: tune one dispatch of an input file, end to end."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from iree.compiler import ir

from pipelines import Dispatch, pipeline_for
from tuner.candidates import Candidate, generate_candidates
from tuner.discovery import discover, parse_input, read_workload
from tuner.errors import InputError, OutputError
from tuner.evaluate import EvalSettings, Progress, candidate_flags, evaluate
from tuner.ranking import Ranking, rank
from tuner.report import write_outputs
from tuner.results import Result
from tuner.store import ResultStore
from tuner.targets import Target, parse_target


@dataclass(frozen=True)
class Tuning:
    """What `tune` found: the dispatch, every candidate and result, and their ranking."""

    dispatch: Dispatch
    candidates: tuple[Candidate, ...]
    results: tuple[Result, ...]
    ranking: Ranking
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
         on_candidates: Optional[Callable[[Dispatch, list[Candidate]], None]] = None) -> Tuning:
    """Discover the dispatch, enumerate candidates, compile and time them, write the outputs."""
    input_path = Path(input_path)
    target = parse_target(target) if isinstance(target, str) else target
    if num_candidates < 1:
        raise InputError("--num-candidates must be at least 1")
    output_dir = prepare_output(Path(output_dir))
    ctx = ir.Context()
    module = parse_input(input_path, ctx)
    workload = read_workload(module, input_path)
    dispatch = select_dispatch(discover(input_path, target, ctx), dispatch_name, input_path)
    pipeline = pipeline_for(dispatch)
    assert pipeline is not None  # select_dispatch only returns tunable ones
    candidates = generate_candidates(dispatch, pipeline, num_candidates, ctx)
    if on_candidates:
        on_candidates(dispatch, candidates)
    inputs = tuple(workload.write_inputs(output_dir / "inputs"))
    results = evaluate(candidates, input_path, target, workload.entry, inputs, output_dir / "candidates",
                       ResultStore(output_dir / "results.jsonl"), ctx, settings, progress)
    ranking = rank(results)
    by_id = {c.id: c for c in candidates}
    winner = by_id[ranking.best.candidate_id] if ranking.best else None
    best_spec_path = output_dir / "best_spec.mlir"
    write_outputs(
        output_dir, ranking, results,
        best_spec=winner.spec if winner else None,
        best_flags=candidate_flags(winner, target, best_spec_path) if winner else [],
        meta={
            "input": str(input_path.resolve()),
            "target": target.name,
            "dispatch": dispatch.name,
            "shape": dispatch.shape_name,
            "pipeline": pipeline.name,
            "machine": f"{platform.machine()} {dispatch.target.arch.strip()}, {os.cpu_count()} cores",
        },
    )
    return Tuning(dispatch, tuple(candidates), tuple(results), ranking, output_dir)
