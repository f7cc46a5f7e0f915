"""The compile side: build a candidate (each iree-compile a process of its own, with a timeout),
verify that its config took effect, and, for the two-machine flow, compile a batch in parallel
into the manifest that the benchmark stage measures elsewhere."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from iree.compiler import ir

from pipelines import check_config
from pipelines.parts import TransformSequences
from tuner.run_dir import real_directory, remove_tree, write_file
from tuner.specs.candidates import Candidate
from tuner.specs.transform import uses_codegen_stage
from tuner.discovery.program import TUNER_ATTRIBUTES_FLAG
from tuner.discovery.read_back import read_configured
from tuner.build.dispatch_benchmark import benchmark_function, benchmark_sources, check_split, combine
from tuner.build.kernels import kernel_names
from tuner.core.built import Built, Progress
from tuner.core.results import Result, Status
from tuner.core.settings import EvalSettings
from tuner.targets import Target
from tuner.tools import ToolRun, find_tool, run_tool_retrying_a_hang

__all__ = ["CompileJob", "EvalSettings", "Progress", "candidate_flags", "compile_candidate", "reused_result",
           "verify_build"]


def candidate_flags(candidate: Candidate, target: Target, spec_path: Path) -> list[str]:
    """Every iree-compile flag that builds this candidate (the baseline: the target's alone, and
    the spec where it carries pinned configs of other dispatches)."""
    flags = [*target.compile_flags, *candidate.config.flags]
    configs = [c for _, c in candidate.pinned] + ([candidate.config] if candidate.config.compilation_info else [])
    if configs:
        flags += target.spec_flags(str(spec_path.resolve()), codegen=uses_codegen_stage(configs))
    return flags


DISPATCH_VMFB = "dispatch.vmfb"
COMBINED_BENCHMARK = "bench-split.mlir"  # split-K: the split op's and the adding dispatch's benchmarks in one
BENCH_CONFIGS = "bench-configs"  # the dispatch benchmark module's configured executables


@dataclass(frozen=True)
class CompileJob:
    """A finished compile of one candidate, not yet verified."""

    candidate: Candidate
    run: ToolRun
    flags: list[str]
    directory: Path
    # The program is an IREE dispatch benchmark: the candidate's module is what is timed, by
    # this function (nothing is dumped from it).
    benchmark_entry: Optional[str] = None
    # Where the target times dispatches alone: the benchmark module source compiled into
    # DISPATCH_VMFB (a dumped one, or for split-K the two combined).
    timed_source: Optional[Path] = None
    # The dispatch is timed inside the model (tuner.evaluation.in_model): its kernels are named.
    in_model: bool = False


def compile_candidate(c: Candidate, input_path: Path, target: Target, workdir: Path, timeout_s: float,
                      benchmark_entry: Optional[str] = None, in_model: bool = False,
                      alone_too: bool = False) -> CompileJob:
    """Build the candidate's module (and, where the target times dispatches alone, the dispatch
    benchmark module IREE dumps for the tuned dispatch), in processes of their own. Touches no
    MLIR context, so any number of threads may call it at once. `benchmark_entry`: the program
    is itself an IREE dispatch benchmark, whose function of that name is timed. `in_model`: the
    dispatch is timed by its kernels inside the candidate's module, so no benchmark is dumped,
    unless `alone_too`: the side that times it (another machine) chooses, in the model where CUPTI
    loads there, else alone."""
    cdir = workdir / f"{c.id:04d}"
    remove_tree(cdir)
    real_directory(cdir)
    spec = cdir / "spec.mlir"
    write_file(spec, c.spec)
    flags = candidate_flags(c, target, spec)
    # Dumps go to paths relative to the candidate's directory (the compile runs there): CPU
    # binaries embed the dumped configuration's path, and equal code must give equal binaries.
    dumps = ["--iree-hal-dump-executable-configurations-to=configs", "--iree-hal-dump-executable-binaries-to=binaries"]
    dump_benchmark = target.time_dispatch_only and benchmark_entry is None and (alone_too or not in_model)
    if dump_benchmark:
        dumps.append("--iree-hal-dump-executable-benchmarks-to=bench")
    cmd = [find_tool("iree-compile"), str(input_path.resolve()), *flags, TUNER_ATTRIBUTES_FLAG, *dumps,
           "-o", "candidate.vmfb"]
    run = run_tool_retrying_a_hang(cmd, timeout_s, cwd=cdir)
    if run.ok and dump_benchmark:
        sources = benchmark_sources(cdir / "bench", c.dispatch.name, c.config)
        if not sources:
            what = "the split op and the dispatch adding its parts" if c.config.split_ways > 1 else c.dispatch.name
            return CompileJob(c, replace(run, returncode=1, stderr=f"no dispatch benchmark dumped for {what}"),
                              flags, cdir)
        bench = sources[0] if len(sources) == 1 else combine(sources, cdir / COMBINED_BENCHMARK)
        # Its configuration is dumped too: the module that is timed is checked like the full one.
        # A transform-dialect codegen strategy the baked-in config names lives in the spec:
        # the benchmark's compile needs that library too.
        strategy = (target.spec_flags(str(spec.resolve()), codegen=True) if c.config.part(TransformSequences) else [])
        bench_run = run_tool_retrying_a_hang([find_tool("iree-compile"), str(bench), *target.compile_flags, *strategy,
                              f"--iree-hal-dump-executable-configurations-to={cdir / BENCH_CONFIGS}",
                              "-o", str(cdir / DISPATCH_VMFB)], timeout_s)
        if not bench_run.ok:
            return CompileJob(c, replace(bench_run, seconds=run.seconds + bench_run.seconds), flags, cdir)
        return CompileJob(c, run, flags, cdir, benchmark_entry, bench, in_model=in_model)
    return CompileJob(c, run, flags, cdir, benchmark_entry, in_model=in_model)


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


def built_candidate(c: Candidate, target: Target, cdir: Path, result: Result, vmfb: Optional[Path],
           dispatch_function: Optional[str] = None, dispatch_vmfb: Optional[Path] = None,
           kernels: tuple[str, ...] = ()) -> Built:
    """A Built entry; the spec file is kept even when empty: it is best_spec.mlir if c wins."""
    has_spec = bool(c.config.compilation_info)
    base_flags = tuple(f for f in result.flags if not (has_spec and target.is_spec_flag(f)))
    if dispatch_function and dispatch_vmfb is None:
        dispatch_vmfb = cdir / DISPATCH_VMFB
    spec_flags = target.spec_flags("{spec}", codegen=uses_codegen_stage([c.config])) if has_spec else ()
    return Built(result, vmfb, c.dispatch.out_type, cdir / "spec.mlir", spec_flags,
                 base_flags, dispatch_vmfb, dispatch_function, kernels=kernels)


# What a compile's stderr says when the machine, not the config, failed it.
MACHINE_ERRORS = ("No space left on device", "IO failure", "Cannot allocate memory", "std::bad_alloc",
                  "out of memory", "Input/output error")


# iree-compile links through `sh` and iree-lld; when the linker dies it exits 1 saying
# "Linking failed; escaped command line returned exit code N" (N a wait status: a signal's
# number plus 128, shifted left by 8, 35072 for SIGKILL), after the shell's "Killed" line.
_LINKER_EXIT = re.compile(r"Linking failed; escaped command line returned exit code (-?\d+)")
_SHELL_SIGNAL_LINES = ("Killed", "Terminated", "Segmentation fault", "Aborted", "Bus error")


def _child_killed(stderr: str) -> bool:
    """Whether a tool's child (the linker) was killed by a signal, from what the tool printed."""
    for found in _LINKER_EXIT.finditer(stderr):
        code = int(found.group(1))
        code = code >> 8 if code > 255 else code
        if code < 0 or code > 128:
            return True
    return any(line.strip().split(" (core dumped)")[0] in _SHELL_SIGNAL_LINES for line in stderr.splitlines())


def interrupted(run: ToolRun) -> bool:
    """A failed compile that says nothing about its config: killed by a signal (the
    out-of-memory killer's SIGKILL, a crash; also as an exit code past 128, as a wrapper reports
    it), its linker killed so, or stopped by an I/O or memory error."""
    return (run.returncode < 0 or run.returncode > 128 or any(marker in run.stderr for marker in MACHINE_ERRORS)
            or _child_killed(run.stderr))


def verify_build(job: CompileJob, target: Target, ctx: ir.Context) -> Built:
    """The compiled candidate, or the reason it is not one: read the configured dispatches back
    and check that some root op carries exactly the candidate's config. Uses `ctx`: call it from
    the thread that owns the context."""
    c, run, flags, cdir = job.candidate, job.run, job.flags, job.directory

    def built(status: Status, vmfb: Optional[Path] = None, **kw) -> Built:
        return built_candidate(c, target, cdir, c.result(flags, status, compile_s=run.seconds, command=_command(run, cdir), **kw),
                      vmfb)

    if run.timed_out:
        return built(Status.COMPILE_TIMEOUT, error="iree-compile timed out" + (
            " twice: it hung using no CPU, and again when retried" if run.retried else
            " (it hung using no CPU)" if run.hung else ""))
    if not run.ok:
        status = Status.COMPILE_INTERRUPTED if interrupted(run) else Status.COMPILE_FAILED
        return built(status, error=run.first_error(), stderr=run.stderr[-4000:])
    if not (cdir / "candidate.vmfb").is_file():
        return built(Status.COMPILE_FAILED, error="iree-compile succeeded but wrote no module")
    configured = read_configured((p.read_text() for p in sorted((cdir / "configs").glob("*.mlir"))), ctx)
    # The config took effect if some root op carries exactly what was asked.
    mismatches = [check_config(c.config, d) for d in configured]
    if not any(not m for m in mismatches):
        detail = "; ".join(m[0] for m in mismatches if m) or "no root op found in the configured dispatches"
        return built(Status.CONFIG_NOT_APPLIED, error=detail)
    function = job.benchmark_entry
    if target.time_dispatch_only and function is None and job.timed_source is not None:
        timed_text = job.timed_source.read_text()
        function = benchmark_function(timed_text, ctx)
        if function is None:
            return built(Status.COMPILE_FAILED, error="the dispatch benchmark module has no benchmark function")
        if c.config.split_ways > 1:
            why = check_split(c.config, timed_text, ctx)
            if why:
                return built(Status.CONFIG_NOT_APPLIED, error=f"the split-K benchmark module (what is timed): {why}")
        # The module that is timed is a second compile: it must carry the config as well.
        timed = read_configured((p.read_text() for p in sorted((cdir / BENCH_CONFIGS).glob("*.mlir"))), ctx)
        if not any(not check_config(c.config, d) for d in timed):
            detail = "; ".join(m[0] for m in (check_config(c.config, d) for d in timed) if m) or "no root op in it"
            return built(Status.CONFIG_NOT_APPLIED, error=f"the dispatch benchmark module (what is timed) does not "
                                                          f"carry the config: {detail}")
    result = c.result(flags, Status.OK, compile_s=run.seconds, command=_command(run, cdir),
                      binary_hash=_binary_hash(cdir))
    vmfb = cdir / "candidate.vmfb"
    kernels = kernel_names(c.dispatch.name, c.config.split_ways) if job.in_model else ()
    return built_candidate(c, target, cdir, result, vmfb, function, vmfb if job.benchmark_entry else None, kernels)


def reused_result(c: Candidate, stored: Result, target: Target, workdir: Path) -> Result:
    """A stored result standing for candidate `c` of this run: its spec is written again (it may
    still win and become best_spec.mlir), its id and flags are this run's."""
    cdir = workdir / f"{c.id:04d}"
    real_directory(cdir)
    write_file(cdir / "spec.mlir", c.spec)
    return replace(stored, candidate_id=c.id, label=c.label, flags=candidate_flags(c, target, cdir / "spec.mlir"))
