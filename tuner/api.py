"""The Python API: tune one dispatch of an input file (search, then evaluate), evaluate a given
list of configs (no search), or compile only, for `benchmark_dir` where the device is."""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from iree.compiler import ir

from pipelines import Dispatch, Pipeline, pipeline_for
from tuner.evaluation.benchmark_stage import STORE
from tuner.specs.candidates import Candidate, baseline, candidates_from_knobs, generate_candidates
from tuner.settings import SearchSettings
from tuner.search import Budget, run_search
from tuner.search.live import LiveBatches, SearchPlan, plan_search
from tuner.build.compile import EvalSettings, Progress, candidate_flags, compile_to_manifest
from tuner.discovery.program import Program, discover_program, parse_input
from tuner.errors import InputError, OutputError
from tuner.evaluation.evaluator import Evaluation
from tuner.evaluation.strategies import make_evaluator
from tuner.input.models import program_source
from tuner.build.manifest import MANIFEST, Manifest
from tuner.ranking import Ranking, rank
from tuner.report.outputs import write_outputs
from tuner.profiling.profile import Profile, profile
from tuner.results import EvaluationStats, Result
from tuner.run_dir import RunDirectory, run_identity
from tuner.store import ResultStore
from tuner.targets import Target, parse_target
from tuner.versions import compiler_version, runtime_version
from tuner.discovery.workload import Workload

if TYPE_CHECKING:
    from tuner.problem.crosscheck import CrossCheck


@dataclass(frozen=True)
class Tuning:
    """What an evaluation found: the dispatch, every candidate and result, their ranking and where
    the time went (a compile-only run has a manifest instead of results)."""

    dispatch: Dispatch
    candidates: tuple[Candidate, ...]
    results: tuple[Result, ...]
    ranking: Optional[Ranking]
    stats: Optional[EvaluationStats]
    output_dir: Path
    manifest: Optional[Manifest] = None  # written by a compile-only run
    # Candidate id -> what IREE's own constraints say of a config that failed to build or take.
    compiler_says: Optional[dict] = None


def _scratch() -> str:
    """A directory of this process's own for what a command with no output directory must write
    (an imported ONNX model), removed when the process ends."""
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="iree-tuner-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


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


def select_dispatch(dispatches: list[Dispatch], name: Optional[str], input_path: Path,
                    pipeline_name: Optional[str] = None, skipped: Sequence[tuple[str, str]] = ()) -> Dispatch:
    try:
        tunable = [d for d in dispatches if pipeline_for(d, pipeline_name) is not None]
    except KeyError as e:
        raise InputError(str(e.args[0])) from None
    if not tunable:
        found = ", ".join([f"{d.op_name} ({d.default.pipeline})" for d in dispatches]
                          + [f"{n} ({why})" for n, why in skipped]) or "no root ops"
        through = f" with {pipeline_name}" if pipeline_name else ""
        raise InputError(f"{input_path}: nothing this tuner can tune on this target{through} (found: {found})")
    if name is None:
        return tunable[0]  # the largest by FLOPs
    for d in tunable:
        if d.name == name:
            return d
    raise InputError(f"{input_path}: no tunable dispatch named {name!r}; tunable: {', '.join(d.name for d in tunable)}")


@dataclass(frozen=True)
class Session:
    """What every entry point reads first: the input, its workload and the dispatch to tune."""

    input_path: Path
    target: Target
    output_dir: Path
    ctx: ir.Context
    workload: Workload
    dispatch: Dispatch
    pipeline: Pipeline
    program: Program


def read_program(input_path: Path | str, target: Target | str,
                  workdir: Optional[Path | str]) -> tuple[Path, Target, Path, ir.Context, Program]:
    """The program to compile (an ONNX model's import goes to `workdir`, or a scratch directory),
    its target, where the run writes, and what discovery found in it."""
    target = parse_target(target) if isinstance(target, str) else target
    workdir = Path(workdir) if workdir is not None else Path(_scratch())
    input_path = program_source(Path(input_path), workdir, target)
    ctx = ir.Context()
    parse_input(input_path, ctx)  # one clear line for a missing file or text that is not MLIR
    return input_path, target, workdir, ctx, discover_program(input_path, target, ctx)


def _open(input_path: Path | str, target: Target | str, output_dir: Optional[Path | str],
          dispatch_name: Optional[str], pipeline_name: Optional[str] = None) -> Session:
    input_path, target, output_dir, ctx, program = read_program(input_path, target, output_dir)
    dispatch = select_dispatch(list(program.dispatches), dispatch_name, input_path, pipeline_name, program.skipped)
    pipeline = pipeline_for(dispatch, pipeline_name)
    assert pipeline is not None  # select_dispatch returns tunable dispatches only
    return Session(input_path, target, output_dir, ctx, program.workload(dispatch, input_path), dispatch, pipeline,
                    program)


def tune(input_path: Path | str, target: Target | str = "llvm-cpu", num_candidates: Optional[int] = None,
         output_dir: Path | str = "tuning-output", dispatch_name: Optional[str] = None,
         settings: EvalSettings = EvalSettings(), progress: Optional[Progress] = None,
         on_candidates: Optional[Callable[[Dispatch, list[Candidate]], None]] = None,
         compile_only: bool = False, strategy: str = "auto", devices: Sequence[str] = (),
         store_path: Optional[Path | str] = None, pipeline_name: Optional[str] = None,
         force: bool = False, on_discovered: Optional[Callable[[Program, Dispatch, str], None]] = None,
         inputs: Sequence[Path | str] = (), search: SearchSettings = SearchSettings(),
         on_search: Optional[Callable[[dict], None]] = None) -> Tuning:
    """Discover the dispatch, search its valid space (tuner.search: `search` says which search,
    its budget of evaluations and seconds, its seed), evaluating each batch the search proposes,
    then confirm the most promising against the baseline (see `evaluate`). `num_candidates` is
    the budget's old name and wins where given. `pipeline_name` picks a codegen pipeline other
    than the one for the compiler's own choice. The output directory is locked for the run; one
    that holds another input's run is refused unless `force` (which clears it). `inputs`: the
    user's own .npy files for the entry's arguments, in order (default: generated).
    `on_search(summary)` hears what the search did (seeds, dropped seeds, space size)."""
    if num_candidates is not None:
        search = replace(search, budget=num_candidates)
    if search.budget < 1:
        raise InputError("--budget (--num-candidates) must be at least 1")
    if search.seconds is not None and not 0 < search.seconds < float("inf"):
        raise InputError("--time-budget must be a positive number of seconds")
    target = parse_target(target) if isinstance(target, str) else target
    with RunDirectory(Path(output_dir), run_identity(Path(input_path), target.name, dispatch_name, pipeline_name),
                      force):
        session = _open(input_path, target, output_dir, dispatch_name, pipeline_name)
        how = "named by --dispatch" if dispatch_name else "the only tunable dispatch"
        if dispatch_name is None:
            session, how = _pick_by_time(session, pipeline_name, compile_only, settings, progress)
        if on_discovered:
            on_discovered(session.program, session.dispatch, how)
        _take_inputs(session, inputs)
        session = _with_constraints(session, search.constraints, search.budget)
        plan = plan_search(session.dispatch, session.pipeline, search)
        if compile_only:
            if on_search:
                on_search(plan.summary())
            from tuner.search.rounds import next_round

            store = _store(session, store_path)
            try:
                candidates, done = next_round(plan, session.dispatch, session.pipeline, session.ctx,
                                              session.target.spec_entry, store)
            finally:
                store.close()
            if on_candidates:
                on_candidates(session.dispatch, candidates)
            return evaluate(session, candidates, settings, progress, True, strategy, devices, store_path,
                            given=bool(inputs), search_meta=plan.summary(candidates), search_done=done)
        return search_and_evaluate(session, plan, settings, progress, on_candidates, strategy, devices, store_path,
                                    given=bool(inputs), on_search=on_search)


@dataclass(frozen=True)
class DispatchRow:
    """One dispatch of a program, as `iree-tuner dispatches` lists it."""

    name: str
    kind: str  # contraction, convolution, attention, or "" for one this tuner does not read
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


def list_dispatches(input_path: Path | str, target: Target | str = "llvm-cpu",
                    pipeline_name: Optional[str] = None, profile_dir: Optional[Path | str] = None,
                    progress: Optional[Progress] = None) -> DispatchList:
    """Every dispatch of the program under `target`: the tunable ones largest first (by FLOPs per
    call of their entry, or by measured time with a profile), then the others with why none of
    this tuner's pipelines takes them. With `profile_dir`, each dispatch is timed (tuner.profiling.profile
    says how) and each entry function whole on the target's device; the work goes there."""
    input_path, target, workdir, ctx, program = read_program(input_path, target, profile_dir)
    measured = profile(input_path, target, program, workdir, ctx, progress=progress) if profile_dir is not None else None
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
                                "" if pipeline else f"no pipeline of this tuner takes it (the compiler's: {d.default.pipeline})",
                                d.flops * max(1, runs)))
    for name, why in program.skipped:
        entry = program.entries.get(name, "no public function runs it")
        rows.append(DispatchRow(name, "", why.split(":")[0], "", program.runs.get(name, 0),
                                entry.entry if not isinstance(entry, str) else entry, "", why))
    if measured is not None:
        rows = [replace(r, ms=measured.times[r.name].ms if r.name in measured.times else None,
                        share=measured.share(r.name), untimed=measured.untimed.get(r.name, "")) for r in rows]
        rows.sort(key=lambda r: (r.why_not != "", -(r.share or 0.0), -r.flops))
    else:
        rows.sort(key=lambda r: (r.why_not != "", -r.flops))
    return DispatchList(tuple(rows), measured)


def list_candidates(input_path: Path | str, target: Target | str = "llvm-cpu", num_candidates: int = 30,
                    dispatch_name: Optional[str] = None, pipeline_name: Optional[str] = None,
                    progress: Optional[Progress] = None, constraints: str = "native") -> tuple[Dispatch, list[Candidate]]:
    """The dispatch and its candidates (baseline first), as `tune` would try them; nothing is
    compiled beyond discovery, nothing is timed."""
    if num_candidates < 1:
        raise InputError("--num-candidates must be at least 1")
    session = _with_constraints(_open(input_path, target, None, dispatch_name, pipeline_name), constraints,
                                num_candidates)
    return session.dispatch, generate_candidates(session.dispatch, session.pipeline, num_candidates, session.ctx,
                                                 session.target.spec_entry, progress=progress)


def benchmark_configs(input_path: Path | str, configs: list[dict], target: Target | str = "llvm-cpu",
                      output_dir: Path | str = "benchmark-output", dispatch_name: Optional[str] = None,
                      settings: EvalSettings = EvalSettings(), progress: Optional[Progress] = None,
                      on_candidates: Optional[Callable[[Dispatch, list[Candidate]], None]] = None,
                      strategy: str = "auto", devices: Sequence[str] = (),
                      store_path: Optional[Path | str] = None,
                      on_warning: Optional[Callable[[str], None]] = None,
                      pipeline_name: Optional[str] = None, force: bool = False,
                      inputs: Sequence[Path | str] = (), compile_only: bool = False) -> Tuning:
    """Evaluate the given knob assignments (and the baseline) for the dispatch; no search. With
    `compile_only`, compile and verify them into a manifest for `benchmark_dir`."""
    target = parse_target(target) if isinstance(target, str) else target
    with RunDirectory(Path(output_dir), run_identity(Path(input_path), target.name, dispatch_name, pipeline_name),
                      force):
        session = _open(input_path, target, output_dir, dispatch_name, pipeline_name)
        _take_inputs(session, inputs)
        candidates, warnings = candidates_from_knobs(session.dispatch, session.pipeline, configs, session.ctx,
                                                     session.target.spec_entry)
        for warning in warnings:
            if on_warning:
                on_warning(warning)
        if on_candidates:
            on_candidates(session.dispatch, candidates)
        return evaluate(session, candidates, settings, progress, compile_only, strategy, devices, store_path,
                        given=bool(inputs))


PROFILE = "profile"


def _pick_by_time(session: Session, pipeline_name: Optional[str], compile_only: bool, settings: EvalSettings,
                  progress: Optional[Progress]) -> tuple[Session, str]:
    """With several tunable dispatches, the one with the largest measured share of its entry's
    time (tuner.profiling.profile, in DIR/profile); with no device at hand (compile-only), the largest by
    FLOPs. Returns the session for the chosen dispatch and how it was chosen."""
    tunable = [d for d in session.program.dispatches if pipeline_for(d, pipeline_name) is not None]
    if len(tunable) < 2:
        return session, "the only tunable dispatch"
    if compile_only:
        return session, f"the largest of {len(tunable)} tunable dispatches by FLOPs (compile-only: no device to time them)"
    measured = profile(session.input_path, session.target, session.program, session.output_dir / PROFILE,
                       session.ctx, timeout_s=settings.run_timeout_s, progress=progress)
    timed = [d for d in tunable if d.name in measured.times]
    if not timed:
        return session, f"the largest of {len(tunable)} tunable dispatches by FLOPs (none could be timed)"
    best = max(timed, key=lambda d: measured.times[d.name].total_ms)
    share = measured.share(best.name) or 0.0
    chosen = replace(session, dispatch=best, pipeline=pipeline_for(best, pipeline_name),
                     workload=session.program.workload(best, session.input_path))
    return chosen, (f"the largest measured share of {len(tunable)} tunable dispatches: {100 * share:.0f}% of "
                    f"@{measured.times[best.name].entry}'s dispatch time ({measured.method})")


GIVEN_INPUTS = "given-inputs"


def _take_inputs(session: Session, inputs: Sequence[Path | str]) -> None:
    """Check the user's own input files against the entry and keep them in the run's directory."""
    given = session.output_dir / GIVEN_INPUTS
    if given.exists():
        shutil.rmtree(given)
    if inputs:
        session.workload.given_inputs([Path(p) for p in inputs], given)


def _store(session: Session, store_path: Optional[Path | str]) -> ResultStore:
    return ResultStore(Path(store_path) if store_path else session.output_dir / STORE, compiler_version(),
                       runtime_version())


def _with_constraints(session: Session, source: str, budget: int) -> Session:
    """The session with its pipeline reading its valid configs from `source` (--constraints)."""
    from tuner.problem.sources import with_constraints

    return replace(session, pipeline=with_constraints(source, session.pipeline, session.dispatch, session.input_path,
                                                      session.target, session.ctx, session.dispatch.flags, budget))


def _meta(session: Session, given: bool) -> dict:
    return {
        "input": str(session.input_path.resolve()),
        "target": session.target.name,
        "dispatch": session.dispatch.name,
        "shape": session.dispatch.shape_name,
        "pipeline": session.pipeline.name,
        "constraints": session.pipeline.constraints,
        "input_digest": session.dispatch.source_digest,
        "entry": session.workload.entry,  # the function that runs the dispatch: what is run and timed
        **({"given_inputs": GIVEN_INPUTS} if given else {}),
        "compiled_on": f"{platform.machine()}, {os.cpu_count()} cores",
    }


def _evaluator(session: Session, store: ResultStore, settings: EvalSettings, progress: Optional[Progress],
               strategy: str, devices: Sequence[str], given: bool):
    """The evaluator `strategy` names ("auto": the target's default) for the session, building
    into DIR/candidates (a manifest there is removed: its modules are about to be rebuilt)."""
    output_dir, target = session.output_dir, session.target
    (output_dir / MANIFEST).unlink(missing_ok=True)
    strategy = target.default_strategy if strategy == "auto" else strategy
    return make_evaluator(strategy, session.input_path, target, session.workload, output_dir / "candidates", store,
                          settings, devices, progress, session.ctx,
                          given_inputs=output_dir / GIVEN_INPUTS if given else None)


def search_and_evaluate(session: Session, plan: SearchPlan, settings: EvalSettings, progress: Optional[Progress],
                         on_candidates: Optional[Callable[[Dispatch, list[Candidate]], None]], strategy: str,
                         devices: Sequence[str], store_path: Optional[Path | str], given: bool,
                         on_search: Optional[Callable[[dict], None]] = None) -> Tuning:
    """Run the plan's search with an evaluator: each batch compiled and timed (no confirmation
    round), the search told each first-pass figure, until the budget is spent; then the same
    evaluator confirms the most promising of all of them against the baseline in interleaved
    rounds, reusing every first-pass result, and the outputs are written. Each measured config's
    features go to the store; with `warm_start`, a model search also learns from the store's
    measurements of other dispatches; `on_search(summary)` hears what the search starts from."""
    target = session.target
    store = _store(session, store_path)
    total = plan.settings.budget
    offset = [0]

    def batch_progress(phase: str, done: int, of: int) -> None:
        """Compiles and first-pass timings count against the whole budget; the rest per call."""
        if progress is None:
            return
        if phase in ("compile", "benchmark"):
            progress(phase, min(total, offset[0] + done), total)
        else:
            progress(phase, done, of)

    try:
        evaluator = _evaluator(session, store, settings, batch_progress, strategy, devices, given)
        passes: list[EvaluationStats] = []

        def evaluate_batch(candidates: list[Candidate], batch_settings: EvalSettings) -> Evaluation:
            evaluation = evaluator.evaluate(candidates, batch_settings)
            passes.append(evaluation.stats)
            return evaluation

        batches = LiveBatches(session.dispatch, session.pipeline, plan.space,
                              baseline(session.dispatch, session.pipeline.name, session.ctx, target.spec_entry),
                              session.ctx, target.spec_entry, evaluate_batch, settings)
        # What a later model search of another dispatch may learn from (whatever searched here).
        batches.on_made = lambda index, c: store.put_features(c.key, session.pipeline.name, session.dispatch.name,
                                                              *plan.space.named(index))
        if plan.settings.warm_start and hasattr(plan.search, "warm_start"):
            warm_start(plan, store, session.pipeline.name, session.dispatch.name, evaluator.conditions)
        if on_search:
            on_search(plan.summary())

        def advance(n: int) -> None:
            offset[0] += n

        batches.on_batch = advance
        batches.budget = plan.settings.budget
        plan.steps = run_search(plan.search, batches, Budget(plan.settings.budget, plan.settings.seconds),
                                plan.settings.batch_size)
        plan.proposed_by = batches.proposed_by
        candidates = batches.candidates
        if on_candidates:
            on_candidates(session.dispatch, candidates)
        if batches.final is not None:  # the last batch confirmed them all
            evaluation = batches.final
            passes.pop()
        else:  # stopped early (time budget): confirm the best of all now
            evaluator.progress = progress
            evaluation = evaluator.evaluate(candidates)
        evaluation = replace(evaluation, stats=evaluation.stats.after(passes, len(candidates)))
    finally:
        store.close()
    return _write(session, candidates, evaluation, list(evaluator.devices), given, plan.summary(candidates))


def warm_start(plan: SearchPlan, store: ResultStore, pipeline: str, dispatch: str, conditions: tuple[str, str]) -> None:
    """Start the plan's model search from the store's measurements of other dispatches of the
    pipeline, timed on this device the same way (learning across runs); the plan's summary says
    from how many, of which dispatches, where it did."""
    from tuner.search.prior import Prior, PriorPoint

    prior = Prior(tuple(PriorPoint(f, t, speedup, name)
                        for f, t, speedup, name in store.measured_elsewhere(pipeline, dispatch, *conditions)))
    if plan.search.warm_start(prior):
        plan.warm_started = prior.summary()


def evaluate(session: Session, candidates: list[Candidate], settings: EvalSettings, progress: Optional[Progress],
             compile_only: bool, strategy: str, devices: Sequence[str], store_path: Optional[Path | str],
             given: bool = False, search_meta: Optional[dict] = None, search_done: bool = False) -> Tuning:
    """Compile and measure the candidates with the chosen evaluator, reusing and filling the
    result store, then write best_spec.mlir, best_flags.txt and results.json. With
    `compile_only`, compile and verify them into a manifest for `iree-tuner benchmark DIR`.
    `strategy` names an evaluator (tuner.evaluation.strategies.STRATEGIES) or is "auto": the target's own
    default."""
    output_dir, target = session.output_dir, session.target
    meta = {**_meta(session, given), **({"search": {**search_meta, "done": search_done}} if search_meta else {})}
    store = _store(session, store_path)
    try:
        if compile_only:
            manifest = compile_to_manifest(candidates, session.input_path, target, session.workload, output_dir,
                                           session.ctx, store, settings, meta, progress)
            says = compiler_says_of_failures(session, candidates, [b.result for b in manifest.built])
            return Tuning(session.dispatch, tuple(candidates), (), None, None, output_dir, manifest, says)
        evaluator = _evaluator(session, store, settings, progress, strategy, devices, given)
        evaluation = evaluator.evaluate(candidates)
    finally:
        store.close()
    return _write(session, candidates, evaluation, list(evaluator.devices), given, search_meta)


def _write(session: Session, candidates: list[Candidate], evaluation: Evaluation, devices: list[str], given: bool,
           search_meta: Optional[dict]) -> Tuning:
    """Rank the evaluation and write best_spec.mlir, best_flags.txt and results.json."""
    output_dir, target = session.output_dir, session.target
    ranking = rank(evaluation.results)
    # The winner, or, when none beat the default beyond the noise, the default (its empty spec).
    chosen = next((c for c in candidates if ranking.best and c.id == ranking.best.candidate_id), None) \
        or next(c for c in candidates if c.is_baseline)
    proposed = (search_meta or {}).get("proposed_by", {})
    annotations: dict[int, dict] = {int(k): {"proposed_by": v} for k, v in proposed.items()}
    says = compiler_says_of_failures(session, candidates, evaluation.results)
    for cid, said in says.items():
        annotations.setdefault(cid, {})["compiler_constraints"] = said
    write_outputs(
        output_dir, ranking, list(evaluation.results),
        spec=chosen.spec, flags=candidate_flags(chosen, target, output_dir / "best_spec.mlir"),
        meta={**_meta(session, given), "devices": devices, "evaluation": evaluation.stats.to_json(),
              **({"search": search_meta} if search_meta else {})},
        annotations=annotations,
    )
    return Tuning(session.dispatch, tuple(candidates), evaluation.results, ranking, evaluation.stats, output_dir,
                  compiler_says=says)


def compiler_says_of_failures(session: Session, candidates: Sequence[Candidate],
                              results: Sequence[Result]) -> dict[int, list[str]]:
    """For each candidate that failed to build or whose config did not take, what IREE's own
    constraints for the dispatch say of its config: the messages of the assertions it breaks
    (with their values), or that they admit it. Empty where the compiler emits no constraints
    for the pipeline or its configs cannot be put in the compiler's knobs."""
    from tuner.problem.compiler import emitted_problems, problem_for
    from pipelines.base import NotInCompilerKnobs
    from tuner.problem.crosscheck import compiler_assignment
    from tuner.results import Status

    failed = {r.candidate_id for r in results
              if r.status in (Status.COMPILE_FAILED, Status.CONFIG_NOT_APPLIED) and not r.is_baseline}
    pipeline = session.pipeline
    base = pipeline.native
    if not failed or base.compiler_pipeline is None or not base.maps_to_compiler(session.dispatch):
        return {}
    try:
        problem = problem_for(emitted_problems(session.input_path, session.target, session.ctx, session.dispatch.flags),
                              session.dispatch.name, base.compiler_pipeline, session.target)
    except InputError:
        return {}
    out = {}
    for c in candidates:
        if c.id not in failed or not c.config.knobs:
            continue
        knobs = dict(c.config.knobs)
        try:
            mapped = knobs if pipeline.constraints == "compiler" else \
                compiler_assignment(base, session.dispatch, knobs, problem, problem.intrinsic_indices())
        except NotInCompilerKnobs as e:
            out[c.id] = [str(e)]
            continue
        out[c.id] = problem.violations(mapped) or ["admitted by IREE's constraints"]
    return out


def crosscheck_input(input_path: Path | str, target: Target | str, output_dir: Path | str = "crosscheck-output",
                     dispatch_name: Optional[str] = None, pipeline_name: Optional[str] = None, limit: int = 5000,
                     seconds: float = 120.0, compile_per_class: int = 2, force: bool = False,
                     progress: Optional[Progress] = None) -> list[CrossCheck]:
    """For each tunable dispatch of the input (or the one named) and each pipeline of this tuner
    that takes it and whose constraints the compiler emits (or the one named): the native and
    the compiler's space side by side (tuner.problem.crosscheck). Examples of each difference are
    compiled in `output_dir`. A pipeline the compiler emits no constraints for (llvm-cpu) is a
    one-line error."""
    from pipelines import PIPELINES
    from tuner.problem.compiler import emitted_problems, problem_for
    from tuner.problem.crosscheck import crosscheck

    target = parse_target(target) if isinstance(target, str) else target
    output_dir = Path(output_dir)
    with RunDirectory(output_dir, run_identity(Path(input_path), target.name, dispatch_name, pipeline_name), force):
        input_path, target, _, ctx, program = read_program(input_path, target, output_dir)
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
                out.append(crosscheck(d, p, problem, input_path, target, ctx, output_dir / d.name / p.name, limit,
                                      seconds, compile_per_class, progress=progress))
        return out
