"""The compile stage: compile candidates in parallel (each iree-compile its own process), verify
that each config took effect, and write the manifest that the benchmark stage measures."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Optional

from iree.compiler import ir

from pipelines import check_config
from tuner.candidates import Candidate
from tuner.discovery import TUNER_ATTRIBUTES_FLAG, read_configured
from tuner.measure import Built, Progress
from tuner.results import Result, Status
from tuner.benchmark_stage import STORE
from tuner.manifest import Manifest
from tuner.workload import Workload
from tuner.settings import EvalSettings
from tuner.store import ResultStore
from tuner.targets import Target
from tuner.tools import ToolRun, find_tool, run_tool

__all__ = ["EvalSettings", "Progress", "candidate_flags", "compile_all", "compile_to_manifest"]


def candidate_flags(candidate: Candidate, target: Target, spec_path: Path) -> list[str]:
    """Every iree-compile flag that builds this candidate (the baseline: the target's alone)."""
    flags = [*target.compile_flags, *candidate.config.flags]
    if candidate.config.compilation_info:
        flags += target.spec_flags(str(spec_path.resolve()))
    return flags


def _result(c: Candidate, flags: list[str], status: Status, **kw) -> Result:
    return Result(candidate_id=c.id, key=c.key, label=c.label, is_baseline=c.is_baseline,
                  knobs=dict(c.config.knobs), flags=flags, status=status, **kw)


DISPATCH_VMFB = "dispatch.vmfb"


def _compile(c: Candidate, input_path: Path, target: Target, workdir: Path, timeout_s: float
             ) -> tuple[Candidate, ToolRun, list[str], Path]:
    """Build the candidate's module (and, where the target times dispatches alone, the dispatch
    benchmark module IREE dumps for the tuned dispatch), in processes of their own."""
    cdir = workdir / f"{c.id:04d}"
    shutil.rmtree(cdir, ignore_errors=True)
    cdir.mkdir(parents=True)
    spec = cdir / "spec.mlir"
    spec.write_text(c.spec)
    flags = candidate_flags(c, target, spec)
    # Dumps go to paths relative to the candidate's directory (the compile runs there): CPU
    # binaries embed the dumped configuration's path, and equal code must give equal binaries.
    dumps = ["--iree-hal-dump-executable-configurations-to=configs", "--iree-hal-dump-executable-binaries-to=binaries"]
    if target.time_dispatch_only:
        dumps.append("--iree-hal-dump-executable-benchmarks-to=bench")
    cmd = [find_tool("iree-compile"), str(input_path.resolve()), *flags, TUNER_ATTRIBUTES_FLAG, *dumps,
           "-o", "candidate.vmfb"]
    run = run_tool(cmd, timeout_s, cwd=cdir)
    if run.ok and target.time_dispatch_only:
        bench = _dispatch_benchmark_source(cdir / "bench", c.dispatch.name)
        if bench is None:
            return c, replace(run, returncode=1, stderr=f"no dispatch benchmark dumped for {c.dispatch.name}"), flags, cdir
        bench_run = run_tool([find_tool("iree-compile"), str(bench), *target.compile_flags,
                              "-o", str(cdir / DISPATCH_VMFB)], timeout_s)
        if not bench_run.ok:
            return c, replace(bench_run, seconds=run.seconds + bench_run.seconds), flags, cdir
    return c, run, flags, cdir


def _dispatch_benchmark_source(directory: Path, dispatch_name: str) -> Optional[Path]:
    """The dumped benchmark module that dispatches `dispatch_name` (one file per executable)."""
    for path in sorted(directory.glob("*.mlir")):
        if f"@{dispatch_name}" in path.read_text():
            return path
    return None


def _command(run: ToolRun, cdir: Path) -> list[str]:
    """The compile command as a shell would replay it (it ran in the candidate's directory)."""
    return ["cd", str(cdir), "&&", *run.command]


def _binary_hash(cdir: Path) -> str:
    """One hash over every compiled executable binary of the candidate, in name order: two
    candidates that compile to the same code hash the same."""
    digest = hashlib.sha256()
    for path in sorted((cdir / "binaries").glob("*")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _benchmark_function(path: Path, ctx: ir.Context) -> Optional[str]:
    """The function IREE marked as a dispatch benchmark (iree.reflection: iree.benchmark)."""
    with ctx:
        module = ir.Module.parse(path.read_text())
        for op in module.body.operations:
            attrs = op.operation.attributes
            if "iree.reflection" in attrs and "iree.benchmark" in ir.DictAttr(attrs["iree.reflection"]):
                return ir.StringAttr(attrs["sym_name"]).value
    return None


def _built(c: Candidate, target: Target, cdir: Path, result: Result, vmfb: Optional[Path],
           dispatch_function: Optional[str] = None) -> Built:
    """A Built entry; the spec file is kept even when empty: it is best_spec.mlir if c wins."""
    has_spec = bool(c.config.compilation_info)
    base_flags = tuple(f for f in result.flags if not (has_spec and f.startswith(target.spec_flag + "=")))
    dispatch_vmfb = cdir / DISPATCH_VMFB if dispatch_function else None
    return Built(result, vmfb, c.dispatch.out_type, cdir / "spec.mlir", target.spec_flag if has_spec else None,
                 base_flags, dispatch_vmfb, dispatch_function)


def _verify(c: Candidate, run: ToolRun, flags: list[str], cdir: Path, target: Target, ctx: ir.Context) -> Built:
    def built(status: Status, vmfb: Optional[Path] = None, **kw) -> Built:
        return _built(c, target, cdir, _result(c, flags, status, compile_s=run.seconds, command=_command(run, cdir), **kw),
                      vmfb)

    if run.timed_out:
        return built(Status.COMPILE_TIMEOUT, error="iree-compile timed out")
    if not run.ok:
        return built(Status.COMPILE_FAILED, error=run.first_error(), stderr=run.stderr[-4000:])
    configured = read_configured((p.read_text() for p in sorted((cdir / "configs").glob("*.mlir"))), ctx)
    # The config took effect if some root op carries exactly what was asked.
    mismatches = [check_config(c.config, d) for d in configured]
    if not any(not m for m in mismatches):
        detail = "; ".join(m[0] for m in mismatches if m) or "no root op found in the configured dispatches"
        return built(Status.CONFIG_NOT_APPLIED, error=detail)
    function = None
    if target.time_dispatch_only:
        function = _benchmark_function(_dispatch_benchmark_source(cdir / "bench", c.dispatch.name), ctx)
        if function is None:
            return built(Status.COMPILE_FAILED, error="the dispatch benchmark module has no benchmark function")
    result = _result(c, flags, Status.OK, compile_s=run.seconds, command=_command(run, cdir),
                     binary_hash=_binary_hash(cdir))
    return _built(c, target, cdir, result, cdir / "candidate.vmfb", function)


def compile_all(candidates: list[Candidate], input_path: Path, target: Target, workdir: Path,
                settings: EvalSettings, ctx: ir.Context, progress: Optional[Progress] = None) -> list[Built]:
    """Compile in parallel (each iree-compile its own process); read back and verify in this
    thread (an MLIR context is not shared across threads)."""
    built: list[Built] = []
    with ThreadPoolExecutor(max_workers=max(1, settings.compile_workers)) as pool:
        futures = [pool.submit(_compile, c, input_path, target, workdir, settings.compile_timeout_s) for c in candidates]
        for i, future in enumerate(as_completed(futures), 1):
            c, run, flags, cdir = future.result()
            built.append(_verify(c, run, flags, cdir, target, ctx))
            if progress:
                progress("compile", i, len(candidates))
    return sorted(built, key=lambda b: b.result.candidate_id)


def compile_to_manifest(candidates: list[Candidate], input_path: Path, target: Target, workload: Workload,
                        root: Path, ctx: ir.Context, settings: EvalSettings = EvalSettings(),
                        meta: Optional[dict] = None, progress: Optional[Progress] = None) -> Manifest:
    """The compile stage: compile and verify every candidate not already measured in `root`'s
    result store, and write the manifest the benchmark stage reads."""
    stored = ResultStore(root / STORE).load()
    todo = [c for c in candidates if c.is_baseline or c.key not in stored]
    built = compile_all(todo, input_path, target, root / "candidates", settings, ctx, progress)
    compiled = {c.id for c in todo}
    for c in candidates:
        if c.id in compiled:
            continue
        # Measured by an earlier run: keep its spec (it may still win), skip the compile.
        cdir = root / "candidates" / f"{c.id:04d}"
        cdir.mkdir(parents=True, exist_ok=True)
        (cdir / "spec.mlir").write_text(c.spec)
        result = replace(stored[c.key], candidate_id=c.id, flags=candidate_flags(c, target, cdir / "spec.mlir"))
        built.append(_built(c, target, cdir, result, None))
    manifest = Manifest(workload, target.device, tuple(sorted(built, key=lambda b: b.result.candidate_id)),
                        meta or {})
    manifest.write(root)
    return manifest
