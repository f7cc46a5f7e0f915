"""The compile-and-benchmark loop: compile candidates in parallel, verify each config took
effect, then run and time them one at a time against the baseline's output."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np
from iree.compiler import ir

from pipelines import check_config
from tuner.candidates import Candidate
from tuner.discovery import TUNER_ATTRIBUTES_FLAG, read_configured
from tuner.results import Result, Status
from tuner.runner import RunSettings, Timing, benchmark, relative_error, run_once, tolerance
from tuner.store import ResultStore
from tuner.errors import ToolError
from tuner.targets import Target
from tuner.tools import ToolRun, find_tool, run_tool

# phase ("compile" or "benchmark"), done, total
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class EvalSettings:
    compile_timeout_s: float = 300.0
    compile_workers: int = os.cpu_count() or 1
    repetitions: int = 5
    min_time_s: float = 0.1
    run_timeout_s: float = 120.0
    # Before naming a winner, the fastest few and the baseline are timed again in interleaved
    # rounds, so that one lucky or unlucky first measurement on a noisy machine does not decide.
    confirm_top: int = 4
    confirm_rounds: int = 3


def candidate_flags(candidate: Candidate, target: Target, spec_path: Path) -> list[str]:
    """Every iree-compile flag that builds this candidate (the baseline: the target's alone)."""
    flags = [*target.compile_flags, *candidate.config.flags]
    if candidate.config.compilation_info:
        flags += target.spec_flags(str(spec_path.resolve()))
    return flags


@dataclass(frozen=True)
class _Built:
    candidate: Candidate
    vmfb: Optional[Path]
    result: Result  # status so far (OK means: compiled, and the config was read back)


def _base_result(c: Candidate, flags: list[str], status: Status, **kw) -> Result:
    return Result(candidate_id=c.id, key=c.key, label=c.label, is_baseline=c.is_baseline,
                  knobs=dict(c.config.knobs), flags=flags, status=status, **kw)


def _compile(c: Candidate, input_path: Path, target: Target, workdir: Path, timeout_s: float) -> tuple[Candidate, ToolRun, list[str], Path]:
    cdir = workdir / f"{c.id:04d}"
    shutil.rmtree(cdir, ignore_errors=True)
    cdir.mkdir(parents=True)
    spec = cdir / "spec.mlir"
    spec.write_text(c.spec)
    flags = candidate_flags(c, target, spec)
    dumps = cdir / "configs"
    cmd = [find_tool("iree-compile"), str(input_path), *flags, TUNER_ATTRIBUTES_FLAG,
           f"--iree-hal-dump-executable-configurations-to={dumps}", "-o", str(cdir / "candidate.vmfb")]
    return c, run_tool(cmd, timeout_s), flags, cdir


def _verify(c: Candidate, run: ToolRun, flags: list[str], cdir: Path, ctx: ir.Context) -> _Built:
    kw = dict(compile_s=run.seconds, command=list(run.command))
    if run.timed_out:
        return _Built(c, None, _base_result(c, flags, Status.COMPILE_TIMEOUT, error="iree-compile timed out", **kw))
    if not run.ok:
        return _Built(c, None, _base_result(c, flags, Status.COMPILE_FAILED, error=run.first_error(),
                                            stderr=run.stderr[-4000:], **kw))
    configured = read_configured((p.read_text() for p in sorted((cdir / "configs").glob("*.mlir"))), ctx)
    # The config took effect if some root op of the expected kind carries exactly what was asked.
    mismatches = [check_config(c.config, d) for d in configured]
    if not any(not m for m in mismatches):
        detail = "; ".join(m[0] for m in mismatches if m) or "no root op found in the configured dispatches"
        return _Built(c, None, _base_result(c, flags, Status.CONFIG_NOT_APPLIED, error=detail, **kw))
    return _Built(c, cdir / "candidate.vmfb", _base_result(c, flags, Status.OK, **kw))


def compile_all(candidates: list[Candidate], input_path: Path, target: Target, workdir: Path,
                settings: EvalSettings, ctx: ir.Context, progress: Optional[Progress] = None) -> list[_Built]:
    """Compile in parallel (each iree-compile its own process), verify in this thread."""
    built: list[_Built] = []
    with ThreadPoolExecutor(max_workers=max(1, settings.compile_workers)) as pool:
        futures = [pool.submit(_compile, c, input_path, target, workdir, settings.compile_timeout_s) for c in candidates]
        for i, future in enumerate(as_completed(futures), 1):
            built.append(_verify(*future.result(), ctx))
            if progress:
                progress("compile", i, len(candidates))
    return sorted(built, key=lambda b: b.candidate.id)


def _measure(b: _Built, settings: RunSettings, reference: Optional[np.ndarray], out_type: str) -> tuple[Result, Optional[np.ndarray]]:
    """Run once for the output, check it, then time it."""
    assert b.vmfb is not None
    out_path = b.vmfb.parent / "output.npy"
    run = run_once(b.vmfb, settings, out_path)
    if not run.ok:
        status = Status.RUN_TIMEOUT if run.timed_out else Status.RUN_FAILED
        return replace(b.result, status=status, error=run.first_error(), stderr=run.stderr[-4000:]), None
    output = np.load(out_path)
    err = 0.0 if reference is None else relative_error(output, reference)
    if err > tolerance(out_type):
        return replace(b.result, status=Status.WRONG_NUMERICS, relative_error=err,
                       error=f"relative error {err:.2e} against the baseline exceeds {tolerance(out_type):.0e}"), output
    timing, brun = benchmark(b.vmfb, settings)
    if timing is None:
        status = Status.RUN_TIMEOUT if brun.timed_out else Status.RUN_FAILED
        return replace(b.result, status=status, relative_error=err, error=brun.first_error(), stderr=brun.stderr[-4000:]), output
    return replace(b.result, times_ms=list(timing.times_ms), median_ms=timing.median_ms,
                   spread_pct=timing.spread_pct, relative_error=err), output


def evaluate(candidates: list[Candidate], input_path: Path, target: Target, entry: str,
             inputs: tuple[Path, ...], workdir: Path, store: ResultStore, ctx: ir.Context,
             settings: EvalSettings = EvalSettings(), progress: Optional[Progress] = None) -> list[Result]:
    """Score every candidate; results already in the store are reused, new ones appended as they
    arrive. The baseline is always (re)measured: it is the numerics reference and the yardstick."""
    stored = store.load()
    todo = [c for c in candidates if c.is_baseline or c.key not in stored]
    reused = [replace(stored[c.key], candidate_id=c.id) for c in candidates if not c.is_baseline and c.key in stored]
    built = compile_all(todo, input_path, target, workdir, settings, ctx, progress)
    run_settings = RunSettings(device=target.device, entry=entry, inputs=inputs,
                               repetitions=settings.repetitions, min_time_s=settings.min_time_s,
                               timeout_s=settings.run_timeout_s)
    results: list[Result] = []
    reference: Optional[np.ndarray] = None
    # Baseline first: every other candidate's output is checked against it.
    ordered = sorted(built, key=lambda b: (not b.candidate.is_baseline, b.candidate.id))
    for i, b in enumerate(ordered, 1):
        result = b.result
        if result.ok:
            result, output = _measure(b, run_settings, reference, b.candidate.dispatch.out_type)
            if b.candidate.is_baseline and output is not None:
                reference = output
        if b.candidate.is_baseline and not result.ok:
            store.append(result)
            raise ToolError(f"the baseline (the compiler's default) failed: {result.error}",
                            result.command, result.stderr)
        results.append(result)
        store.append(result)
        if progress:
            progress("benchmark", i, len(ordered))
    results = confirm(results + reused, workdir, run_settings, settings, store, progress)
    return sorted(results, key=lambda r: r.candidate_id)


def confirm(results: list[Result], workdir: Path, run_settings: RunSettings, settings: EvalSettings,
            store: ResultStore, progress: Optional[Progress] = None) -> list[Result]:
    """Time the baseline and the `confirm_top` fastest again, round-robin, and pool the times."""
    ok = sorted((r for r in results if r.ok and r.median_ms is not None), key=lambda r: r.median_ms)
    chosen = [r for r in ok if r.is_baseline] + [r for r in ok if not r.is_baseline][: settings.confirm_top]
    chosen = [r for r in chosen if (workdir / f"{r.candidate_id:04d}" / "candidate.vmfb").exists()]
    if len(chosen) < 2 or settings.confirm_rounds < 1:
        return results
    pooled = {r.key: list(r.times_ms) for r in chosen}
    total = settings.confirm_rounds * len(chosen)
    done = 0
    for round_ in range(settings.confirm_rounds):
        # Rotate the order each round so that no candidate always runs first or last.
        order = chosen[round_ % len(chosen):] + chosen[: round_ % len(chosen)]
        for r in order:
            timing, _ = benchmark(workdir / f"{r.candidate_id:04d}" / "candidate.vmfb", run_settings)
            if timing is not None:
                pooled[r.key] += timing.times_ms
            done += 1
            if progress:
                progress("confirm", done, total)
    updated = {}
    for r in chosen:
        timing = Timing(tuple(pooled[r.key]))
        updated[r.key] = replace(r, times_ms=list(timing.times_ms), median_ms=timing.median_ms,
                                 spread_pct=timing.spread_pct)
        store.append(updated[r.key])
    return [updated.get(r.key, r) for r in results]
