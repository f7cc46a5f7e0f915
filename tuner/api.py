"""The Python API: tune one dispatch of an input file (search, then evaluate), evaluate a given
list of configs (no search), or compile only, for `benchmark_dir` where the device is."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from pipelines import Dispatch, pipeline_for, why_untunable
from tuner.discovery.data_tiled import with_data_tiled
from tuner.specs.candidates import Candidate, candidates_from_knobs, generate_candidates
from tuner.core.settings import Listeners, RunOptions, SearchSettings
from tuner.search.live import plan_search
from tuner.build.builder import LocalBuilder
from tuner.build.compile import Progress
from tuner.driver import (GIVEN_INPUTS, Session, Tuning, evaluate, open_store, read_program,
                          search_and_evaluate)
from tuner.errors import InputError
from tuner.evaluation.devices import on_every_gpu
from tuner.evaluation.device_calls import timing_apart
from tuner.profiling.profile import Profile, profile
from tuner.run_dir import RunDirectory, fresh, remove_tree, run_identity, unwritable_output
from tuner.targets import Target, check_devices, parse_target

if TYPE_CHECKING:
    from tuner.problem.crosscheck import CrossCheck, CrossCheckLimits


def prepare_output(output_dir: Path) -> Path:
    """Create the output directory or fail with one clear line."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = fresh(output_dir / ".write-test")  # never written through a planted link
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise unwritable_output(output_dir, e) from None
    return output_dir


def select_dispatch(dispatches: list[Dispatch], name: Optional[str], input_path: Path,
                    pipeline_name: Optional[str] = None, skipped: Sequence[tuple[str, str]] = ()) -> Dispatch:
    try:
        tunable = [d for d in dispatches if pipeline_for(d, pipeline_name) is not None]
    except KeyError as e:
        raise InputError(str(e.args[0])) from None
    if not tunable:
        found = ", ".join([f"{d.op_name} ({why_untunable(d, pipeline_name)})" for d in dispatches]
                          + [f"{n} ({why})" for n, why in skipped]) or "no root ops"
        through = f" with {pipeline_name}" if pipeline_name else ""
        raise InputError(f"{input_path}: nothing this tuner can tune on this target{through} (found: {found})")
    if name is None:
        return tunable[0]  # the largest by FLOPs
    for d in tunable:
        if d.name == name:
            return d
    cut = [d.name for d in dispatches if d.name.startswith(name + "$")]
    if cut:  # the shell took `$async...` for a variable: the name reached us cut at the `$`
        raise InputError(f"{input_path}: no dispatch named {name!r}, but {cut[0]!r} begins so: a name holding `$` "
                         f"must be single-quoted in the shell (--dispatch '{cut[0]}')")
    raise InputError(f"{input_path}: no tunable dispatch named {name!r}; tunable: {', '.join(d.name for d in tunable)}")


def open_session(input_path: Path | str, target: Target | str, output_dir: Optional[Path | str],
                 dispatch_name: Optional[str], pipeline_name: Optional[str] = None,
                 parameters: Optional[tuple[str, ...]] = (), dynamic_size: Optional[int] = None) -> Session:
    input_path, target, output_dir, ctx, program = read_program(input_path, target, output_dir, parameters,
                                                                dynamic_size)
    dispatch = select_dispatch(list(program.dispatches), dispatch_name, input_path, pipeline_name, program.skipped)
    pipeline = pipeline_for(dispatch, pipeline_name)
    assert pipeline is not None  # select_dispatch returns tunable dispatches only
    return Session(input_path, target, output_dir, ctx, program.workload(dispatch, input_path), dispatch, pipeline,
                    program)


def tune(input_path: Path | str, target: Target | str = "llvm-cpu", output_dir: Path | str = "tuning-output",
         dispatch_name: Optional[str] = None, pipeline_name: Optional[str] = None,
         search: SearchSettings = SearchSettings(), run: RunOptions = RunOptions(),
         listen: Listeners = Listeners()) -> Tuning:
    """Discover the dispatch (`dispatch_name`, else the one with the largest measured share of its
    function's time), search its valid space (tuner.search: `search` says which search, its
    budget of evaluations and seconds, its seed), evaluating each batch the search proposes, then
    confirm the most promising against the baseline (driver.evaluate). `pipeline_name` picks a
    codegen pipeline other than the one for the compiler's own choice. The output directory is
    locked for the run; one that holds another input's run is refused unless `run.force` (which
    clears it). `run.inputs`: the user's own .npy files for the entry's arguments (default:
    generated). `listen` hears the dispatch picked, the search's start and the candidates."""
    search = search.checked()
    target = parse_target(target) if isinstance(target, str) else target
    check_devices(target, run.devices)
    run = on_every_gpu(run, target.device)
    with RunDirectory(Path(output_dir), run_identity(Path(input_path), target.name, dispatch_name, pipeline_name),
                      run.force), timing_apart(run.devices):  # several GPUs at once: a process each
        session = open_session(input_path, target, output_dir, dispatch_name, pipeline_name, run.parameters,
                               run.dynamic_size)
        how = "named by --dispatch" if dispatch_name else "the only tunable dispatch"
        if dispatch_name is None:
            session, how = _pick_by_time(session, pipeline_name, run, listen.progress)
        session = _take_inputs(_with_data_tiled(session), run.inputs)
        if listen.on_discovered:
            listen.on_discovered(session.program, session.dispatch, how)
        session = _with_constraints(session, search.constraints, search.budget)
        plan = plan_search(session.dispatch, session.pipeline, search)
        if run.compile_only:
            if listen.on_search:
                listen.on_search(plan.summary())
            from tuner.search.task import StoredMeasure, TuneTask

            store = open_store(session, run.store_path)
            try:  # the search replayed against the store, up to its first batch not measured yet
                ran = TuneTask(session.dispatch, session.pipeline, session.ctx, session.target.spec_entry, plan,
                               StoredMeasure(store), session.target.pinned).run()
            finally:
                store.close()
            candidates, done = list(ran.candidates), ran.done
            if listen.on_candidates:
                listen.on_candidates(session.dispatch, candidates)
            return evaluate(session, candidates, run, listen.progress, search_meta=plan.summary(candidates),
                            search_done=done)
        return search_and_evaluate(session, plan, run, listen)


@dataclass(frozen=True)
class DispatchRow:
    """One dispatch of a program, as `iree-tuner dispatches` lists it."""

    name: str
    kind: str  # contraction, convolution, attention; for one no pipeline reads: softmax, normalization,
    # reduction, transpose, elementwise or other (tuner.discovery.other_kinds); "" if not read
    op: str
    shape: str
    runs: int  # per call of its entry function
    entry: str  # the function that runs it, or why that function cannot be run
    pipeline: str  # the codegen pipeline that would tune it, or ""
    why_not: str  # why it cannot be tuned ("" when it can)
    flops: int = 0
    # With a profile: one run alone, its runs' share of the entry's summed dispatch time.
    ms: Optional[float] = None
    share: Optional[float] = None
    untimed: str = ""  # why a profile has no time for it

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class DispatchList:
    rows: tuple[DispatchRow, ...]
    profile: Optional[Profile]  # with `profile_dir`: the measured times, and each entry timed whole
    fixed: str = ""  # an ONNX model's symbolic dimensions fixed at import (Program.fixed_text)


def list_dispatches(input_path: Path | str, target: Target | str = "llvm-cpu",
                    pipeline_name: Optional[str] = None, profile_dir: Optional[Path | str] = None,
                    progress: Optional[Progress] = None, parameters: tuple[str, ...] = (),
                    dynamic_size: Optional[int] = None, gpu_timing: str = "auto") -> DispatchList:
    """Every dispatch of the program under `target`: the tunable ones largest first (by FLOPs per
    call of their entry, or by measured time with a profile), then the others with why none of
    this tuner's pipelines takes them. With `profile_dir`, each dispatch is timed (tuner.profiling.profile
    says how) and each entry function whole on the target's device; the work goes there, the
    model reading its external `parameters` (tuner.input.parameters)."""
    input_path, target, workdir, ctx, program = read_program(input_path, target, profile_dir,
                                                             parameters if profile_dir is not None else None,
                                                             dynamic_size)
    if profile_dir is not None and not program.dispatches and not program.skipped:
        raise InputError(f"{input_path}: no dispatches to profile (found: no root ops)")
    measured = (profile(input_path, target, program, workdir, ctx, progress=progress, gpu_timing=gpu_timing)
                if profile_dir is not None else None)
    rows = []
    for d in program.dispatches:
        try:
            pipeline = pipeline_for(d, pipeline_name)
        except KeyError as e:
            raise InputError(str(e.args[0])) from None
        entry = program.entries.get(d.name, "no public function runs it")
        runs = program.runs.get(d.name, 0)
        rows.append(DispatchRow(d.name, d.kind.value, d.op_name, d.shape_name, runs,
                                entry.entry if not isinstance(entry, str) else entry,
                                pipeline.name if pipeline else "",
                                "" if pipeline else why_untunable(d),
                                d.flops * max(1, runs)))
    for name, why in program.skipped:
        entry = program.entries.get(name, "no public function runs it")
        other = program.other_kinds.get(name)
        rows.append(DispatchRow(name, other.kind if other else "", why.split(":")[0], other.shape if other else "",
                                program.runs.get(name, 0), entry.entry if not isinstance(entry, str) else entry, "",
                                why))
    if measured is not None:
        rows = [replace(r, ms=measured.times[r.name].ms if r.name in measured.times else None,
                        share=measured.share(r.name), untimed=measured.untimed.get(r.name, "")) for r in rows]
        rows.sort(key=lambda r: (r.why_not != "", -(r.share or 0.0), -r.flops))
    else:
        rows.sort(key=lambda r: (r.why_not != "", -r.flops))
    return DispatchList(tuple(rows), measured, program.fixed_text())


def list_candidates(input_path: Path | str, target: Target | str = "llvm-cpu", num_candidates: int = 30,
                    dispatch_name: Optional[str] = None, pipeline_name: Optional[str] = None,
                    progress: Optional[Progress] = None, constraints: str = "native") -> tuple[Dispatch, list[Candidate]]:
    """The dispatch and its candidates (baseline first), as `tune` would try them; nothing is
    compiled beyond discovery, nothing is timed."""
    if num_candidates < 1:
        raise InputError("--num-candidates must be at least 1")
    session = _with_constraints(_with_data_tiled(open_session(input_path, target, None, dispatch_name, pipeline_name,
                                                              None)), constraints, num_candidates)
    return session.dispatch, generate_candidates(session.dispatch, session.pipeline, num_candidates, session.ctx,
                                                 session.target.spec_entry, progress=progress,
                                                 pinned=session.target.pinned)


def benchmark_configs(input_path: Path | str, configs: list[dict], target: Target | str = "llvm-cpu",
                      output_dir: Path | str = "benchmark-output", dispatch_name: Optional[str] = None,
                      pipeline_name: Optional[str] = None, run: RunOptions = RunOptions(),
                      listen: Listeners = Listeners()) -> Tuning:
    """Evaluate the given knob assignments (and the baseline) for the dispatch; no search. With
    `run.compile_only`, compile and verify them into a manifest for `benchmark_dir`.
    `listen.on_warning` hears of a config outside the constraints or repeated."""
    target = parse_target(target) if isinstance(target, str) else target
    check_devices(target, run.devices)
    with RunDirectory(Path(output_dir), run_identity(Path(input_path), target.name, dispatch_name, pipeline_name),
                      run.force), timing_apart(run.devices):
        session = open_session(input_path, target, output_dir, dispatch_name, pipeline_name, run.parameters,
                               run.dynamic_size)
        session = _take_inputs(_with_data_tiled(session), run.inputs)
        candidates, warnings = candidates_from_knobs(session.dispatch, session.pipeline, configs, session.ctx,
                                                     session.target.spec_entry, session.target.pinned)
        for warning in warnings:
            if listen.on_warning:
                listen.on_warning(warning)
        if listen.on_candidates:
            listen.on_candidates(session.dispatch, candidates)
        return evaluate(session, candidates, run, listen.progress)


PROFILE = "profile"


def _pick_by_time(session: Session, pipeline_name: Optional[str], run: RunOptions,
                  progress: Optional[Progress]) -> tuple[Session, str]:
    """With several tunable dispatches, the one that takes the most time over the whole file
    (tuner.profiling.profile, in DIR/profile; each entry function called once); with no device at
    hand (compile-only), the most FLOPs per call of its function. Returns the session for the
    chosen dispatch and how it was chosen."""
    tunable = [d for d in session.program.dispatches if pipeline_for(d, pipeline_name) is not None]
    if len(tunable) < 2:
        return session, "the only tunable dispatch"
    measured = None
    if not run.compile_only:
        measured = profile(session.input_path, session.target, session.program, session.output_dir / PROFILE,
                           session.ctx, timeout_s=run.settings.run_timeout_s, progress=progress,
                           gpu_timing=run.settings.gpu_timing)
    best, how = choose_dispatch(tunable, session.program.runs, measured)
    chosen = replace(session, dispatch=best, pipeline=pipeline_for(best, pipeline_name),
                     workload=session.program.workload(best, session.input_path))
    return chosen, how


def choose_dispatch(tunable: Sequence[Dispatch], runs: dict[str, int],
                    measured: Optional[Profile]) -> tuple[Dispatch, str]:
    """The dispatch to tune among `tunable` and how it was chosen: the largest measured time
    (one run x its runs per call of its entry function), over the whole file, where `measured`
    has times; else the most FLOPs per call of its entry (compile-only, or none could be timed).
    A file of several functions is compared across them (each function called once): the share
    said is of the whole file's summed dispatch time, never of one function's."""
    timed = [d for d in tunable if measured is not None and d.name in measured.times]
    if not timed:
        why = "compile-only: no device to time them" if measured is None else "none could be timed"
        best = max(tunable, key=lambda d: d.flops * max(1, runs.get(d.name, 1)))
        return best, f"the largest of {len(tunable)} tunable dispatches by FLOPs ({why})"
    assert measured is not None
    best = max(timed, key=lambda d: measured.times[d.name].total_ms)
    t = measured.times[best.name]
    entries = {measured.times[d.name].entry for d in timed}
    if len(entries) < 2:
        share = measured.share(best.name) or 0.0
        return best, (f"the largest measured share of {len(tunable)} tunable dispatches: {100 * share:.0f}% of "
                      f"@{t.entry}'s dispatch time ({measured.method})")
    whole = sum(x.total_ms for x in measured.times.values())
    return best, (f"the largest measured time of {len(tunable)} tunable dispatches across {len(entries)} functions: "
                  f"{t.total_ms:.3f} ms a call of @{t.entry}, {100 * t.total_ms / whole:.0f}% of the file's summed "
                  f"dispatch time, each function called once ({measured.method})")


def _with_data_tiled(session: Session) -> Session:
    """The session's dispatch with the op data tiling makes of it (tuner.discovery.data_tiled),
    where its pipeline searches that op's configs too (`data_tiling_flags`)."""
    flags = session.pipeline.data_tiling_flags
    if not flags:
        return session
    return replace(session, dispatch=with_data_tiled(session.dispatch, flags, session.input_path, session.target,
                                                     session.ctx))


def _take_inputs(session: Session, inputs: Sequence[Path | str]) -> Session:
    """Check the user's own input files against the entry and keep them in the run's directory;
    the session's workload takes their shapes (they size the dynamic dimensions)."""
    given = session.output_dir / GIVEN_INPUTS
    remove_tree(given)  # a link planted there is removed, not followed
    if not inputs:
        return session
    workload = session.workload.given_inputs([Path(p) for p in inputs], given)
    entries = {n: workload if w == session.workload else w for n, w in session.program.entries.items()}
    return replace(session, workload=workload, program=replace(session.program, entries=entries))


def _with_constraints(session: Session, source: str, budget: int) -> Session:
    """The session with its pipeline reading its valid configs from `source` (--constraints)."""
    from tuner.problem.sources import with_constraints

    return replace(session, pipeline=with_constraints(source, session.pipeline, session.dispatch, session.input_path,
                                                      session.target, session.ctx, session.dispatch.flags, budget))


def crosscheck_input(input_path: Path | str, target: Target | str, output_dir: Path | str = "crosscheck-output",
                     dispatch_name: Optional[str] = None, pipeline_name: Optional[str] = None,
                     limits: Optional[CrossCheckLimits] = None, force: bool = False,
                     progress: Optional[Progress] = None) -> list[CrossCheck]:
    """For each tunable dispatch of the input (or the one named) and each pipeline of this tuner
    that takes it and whose constraints the compiler emits (or the one named): the native and
    the compiler's space side by side (tuner.problem.crosscheck). Examples of each difference are
    compiled in `output_dir`. A pipeline the compiler emits no constraints for (llvm-cpu) is a
    one-line error."""
    from pipelines import PIPELINES
    from tuner.problem.compiler import emitted_problems, problem_for
    from tuner.problem.crosscheck import CrossCheckLimits, crosscheck

    target = parse_target(target) if isinstance(target, str) else target
    output_dir = Path(output_dir)
    with RunDirectory(output_dir, run_identity(Path(input_path), target.name, dispatch_name, pipeline_name), force):
        input_path, target, _, ctx, program = read_program(input_path, target, output_dir, None)
        dispatches = [d for d in program.dispatches if dispatch_name in (None, d.name)]
        if not dispatches:
            raise InputError(f"{input_path}: no tunable dispatch" + (f" named {dispatch_name}" if dispatch_name else ""))
        problems = emitted_problems(input_path, target, ctx)
        out = []
        for d in dispatches:
            pipelines = [p for p in PIPELINES.values() if p.compiler_pipeline is not None and p.supports(d)
                         and pipeline_name in (None, p.name, *p.aliases)]
            if not pipelines:
                own = pipeline_for(d, pipeline_name)
                raise InputError(f"{d.name}: IREE 3.13 emits no constraints for "
                                 f"{own.name if own else 'any pipeline of this tuner'} on {target.name}")
            for p in pipelines:
                problem = problem_for(problems, d.name, p.compiler_pipeline, target)
                builder = LocalBuilder(input_path, target, output_dir / d.name / p.name / "settle", ctx, 300)
                try:
                    out.append(crosscheck(d, p, problem, builder, limits or CrossCheckLimits(), progress))
                finally:
                    builder.close()
        return out
