"""The driver of one tuning: the `Session` it runs in (the input, its target, the dispatch and
its pipeline, where it writes), and the loop between a search and an evaluator, on one machine
or two (compile-only): each batch the search proposes is compiled and timed, the search hears
the figures, the best of all are confirmed side by side with the baseline, and the results are
ranked and written. `tune`, tune-model's dispatch stage and the two-machine steps run through it."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from iree.compiler import ir

from pipelines import Dispatch, Pipeline
from tuner.build.compile import Progress, candidate_flags
from tuner.build.compile_stage import builder_for, compile_to_manifest
from tuner.core.settings import HostReference, Listeners, RunOptions
from tuner.build.manifest import MANIFEST, Manifest
from tuner.discovery.program import Program, discover_program, parse_input, read_input_text
from tuner.discovery.workload import Workload
from tuner.errors import InputError, NotTimedAlone
from tuner.store import STORE
from tuner.evaluation.evaluator import Evaluation, Evaluator
from tuner.evaluation.runners import runner_named
from tuner.strategies import CLUSTER, evaluator_class
from tuner.input.models import imported_program
from tuner.input.parameters import check_scopes, parse_parameters
from tuner.ranking import Ranking, rank
from tuner.report.outputs import write_outputs
from tuner.core.results import EvaluationStats, Result
from tuner.search.live import SearchPlan
from tuner.specs.candidates import Candidate
from tuner.store import ResultStore
from tuner.targets import Target, parse_target
from tuner.search.task import CandidateMade, Event, EvaluatorMeasure, TuneTask
from tuner.versions import compiler_version, runtime_version

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
    families: tuple[str, ...] = ()  # the pipeline's family knob and names (Pipeline.families), for the table



def scratch_dir() -> str:
    """A directory of this process's own for what a command with no output directory must write
    (an imported ONNX model), removed when the process ends."""
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="iree-tuner-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


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


def read_program(input_path: Path | str, target: Target | str, workdir: Optional[Path | str],
                 parameters: Optional[tuple[str, ...]] = (), dynamic_size: Optional[int] = None
                 ) -> tuple[Path, Target, Path, ir.Context, Program]:
    """The program to compile (an ONNX model's import goes to `workdir`, or a scratch directory),
    its target, where the run writes, and what discovery found in it, its workloads reading
    `parameters` (tuner.input.parameters: one clear line if the program reads a scope they lack;
    None where nothing will run, so nothing is checked), and `dynamic_size` (else the program's
    hints, else DEFAULT_DYNAMIC_SIZE) for each dynamic dimension of an entry's arguments; an ONNX
    model's symbolic input dimensions are fixed at `dynamic_size` before import where it is given
    (Program.fixed_dims), so its dispatches are static."""
    target = parse_target(target) if isinstance(target, str) else target
    workdir = Path(workdir) if workdir is not None else Path(scratch_dir())
    input_path, fixed, repaired = imported_program(Path(input_path), workdir, target, static_size=dynamic_size)
    ctx = ir.Context()
    text = read_input_text(input_path)
    parse_input(input_path, ctx, text)  # one clear line for a missing file or text that is not MLIR
    program = replace(discover_program(input_path, target, ctx), fixed_dims=fixed, repaired=repaired)
    if any(getattr(w, "dispatch_benchmark", False) for w in program.entries.values()):
        # An executable already: only the codegen stage reaches it, and nothing splits its op.
        target = target.at_codegen_stage()
        program = replace(program, dispatches=tuple(replace(d, in_executable=True) for d in program.dispatches))
    if parameters is None:
        return input_path, target, workdir, ctx, program.for_running((), dynamic_size)
    parameters = parse_parameters(parameters)
    check_scopes(input_path, text, parameters)
    return input_path, target, workdir, ctx, program.for_running(parameters, dynamic_size)


GIVEN_INPUTS = "given-inputs"



def open_store(session: Session, store_path: Optional[Path | str]) -> ResultStore:
    return ResultStore(Path(store_path) if store_path else session.output_dir / STORE, compiler_version(),
                       runtime_version())


def run_meta(session: Session, given: bool) -> dict:
    return {
        "input": str(session.input_path.resolve()),
        "target": session.target.name,
        "dispatch": session.dispatch.name,
        "shape": session.dispatch.shape_name,
        "pipeline": session.pipeline.name,
        "constraints": session.pipeline.constraints,
        # The pipeline's family knob and its families' names (Pipeline.families), for the report.
        **({"families": list(session.pipeline.families)} if session.pipeline.families else {}),
        "input_digest": session.dispatch.source_digest,
        "entry": session.workload.entry,  # the function that runs the dispatch: what is run and timed
        **({"parameters": list(session.workload.parameters)} if session.workload.parameters else {}),
        **({"given_inputs": GIVEN_INPUTS} if given else {}),
        "compiled_on": f"{platform.machine()}, {os.cpu_count()} cores",
    }


def session_evaluator(session: Session, store: ResultStore, run: RunOptions, progress: Optional[Progress],
                      host: Optional[HostReference] = None, on_result: Optional[Callable] = None) -> Evaluator:
    """The evaluator `run.strategy` names ("auto": the target's default) for the session, with
    the run's settings, devices and runner (`run.runner`, tuner.evaluation.runners; a Ray
    cluster's evaluator brings its own), building into DIR/candidates (a manifest there is removed:
    its modules are about to be rebuilt). `host`: the host's result to check against (on the
    inputs it ran on) where the default's is off it; `on_result` hears each result as it is stored."""
    output_dir, target, given = session.output_dir, session.target, bool(run.inputs)
    (output_dir / MANIFEST).unlink(missing_ok=True)
    strategy = target.default_strategy if run.strategy == "auto" else run.strategy
    evaluator = evaluator_class(strategy)
    if strategy == CLUSTER and run.runner != "local":
        raise InputError(f"--runner {run.runner} with --strategy ray: the cluster's workers run the candidates")
    runner = {} if strategy == CLUSTER else {"runner": runner_named(run.runner)}
    return evaluator(session.input_path, target, session.workload, output_dir / "candidates", store,
                     settings=run.settings, devices=run.devices, progress=progress, ctx=session.ctx,
                     given_inputs=output_dir / GIVEN_INPUTS if given else (host.inputs if host else None),
                     host_reference=host.result if host else None, on_result=on_result, **runner)


def search_and_evaluate(session: Session, plan: SearchPlan, run: RunOptions, listen: Listeners = Listeners()) -> Tuning:
    """Run the plan's search with an evaluator: each batch compiled and timed (no confirmation
    round), the search told each first-pass figure, until the budget is spent; then the same
    evaluator confirms the most promising of all of them against the baseline in interleaved
    rounds, reusing every first-pass result, and the outputs are written. Each measured config's
    features go to the store; with `warm_start`, a model search also learns from the store's
    measurements of other dispatches; `listen.on_search(summary)` hears what the search starts
    from, `listen.on_candidates` the candidates it made."""
    settings, progress, given = run.settings, listen.progress, bool(run.inputs)
    target = session.target
    store = open_store(session, run.store_path)
    batch_progress = BudgetProgress(progress, plan.settings.budget)
    try:
        evaluator = session_evaluator(session, store, run, batch_progress, run.host_reference, listen.on_result)

        def heard(event: Event) -> None:
            if isinstance(event, CandidateMade):
                # Each candidate made is what a later model search of another dispatch may learn
                # from (whatever searched here): its features go to the store.
                store.put_features(event.candidate.key, session.pipeline.name, session.dispatch.name,
                                   *plan.space.named(event.index))
            else:
                if listen.on_results and event.results:
                    listen.on_results(list(event.results))
                batch_progress.batch_done(event.proposals)

        measure = EvaluatorMeasure(evaluator, settings)
        task = TuneTask(session.dispatch, session.pipeline, session.ctx, target.spec_entry, plan, measure,
                        target.pinned, listeners=(heard,))
        if plan.settings.warm_start:
            warm_start(plan, store, session.pipeline.name, session.dispatch.name, evaluator.conditions)
        if listen.on_search:
            listen.on_search(plan.summary())
        ran = task.run()
        candidates = list(ran.candidates)
        if listen.on_candidates:
            listen.on_candidates(session.dispatch, candidates)
        if ran.final is not None:  # the last batch confirmed them all
            evaluation = ran.final
        else:  # stopped early (time budget): confirm the best of all now
            evaluator.progress = progress
            evaluation = measure.confirm(candidates)
        evaluation = replace(evaluation, stats=evaluation.stats.after(list(ran.first_passes), len(candidates)))
    finally:
        store.close()
    return write_tuning(session, candidates, evaluation, list(evaluator.devices), given, plan.summary(candidates))


class BudgetProgress:
    """A search's progress: compiles and first-pass timings counted against its whole budget
    (the batches done before the one under way added in), the other phases per call."""

    def __init__(self, progress: Optional[Progress], total: int) -> None:
        self.progress, self.total, self.before = progress, total, 0

    def __call__(self, phase: str, done: int, of: int) -> None:
        if self.progress is None:
            return
        if phase in ("compile", "benchmark"):
            self.progress(phase, min(self.total, self.before + done), self.total)
        else:
            self.progress(phase, done, of)

    def batch_done(self, size: int) -> None:
        self.before += size


def warm_start(plan: SearchPlan, store: ResultStore, pipeline: str, dispatch: str, conditions: tuple[str, str]) -> None:
    """Start the plan's model search from the store's measurements of other dispatches of the
    pipeline, timed on this device the same way (learning across runs); the plan's summary says
    from how many, of which dispatches, where it did."""
    from tuner.search.prior import Prior, PriorPoint

    prior = Prior(tuple(PriorPoint(f, t, speedup, name)
                        for f, t, speedup, name in store.measured_elsewhere(pipeline, dispatch, *conditions)))
    if plan.search.warm_start(prior):
        plan.warm_started = prior.summary()


def evaluate(session: Session, candidates: list[Candidate], run: RunOptions, progress: Optional[Progress] = None,
             search_meta: Optional[dict] = None, search_done: bool = False) -> Tuning:
    """Compile and measure the candidates with the evaluator `run.strategy` names
    (tuner.strategies.STRATEGIES, or "auto": the target's own default), reusing and
    filling the result store, then write best_spec.mlir, best_flags.txt and results.json. With
    `run.compile_only`, compile and verify them into a manifest for `iree-tuner benchmark DIR`."""
    settings, given = run.settings, bool(run.inputs)
    output_dir, target = session.output_dir, session.target
    meta = {**run_meta(session, given), **({"search": {**search_meta, "done": search_done}} if search_meta else {})}
    store = open_store(session, run.store_path)
    try:
        if run.compile_only:
            # CUDA: the device side times in the model (`--gpu-timing model`), or alone from the
            # dumped benchmarks (`alone`), or chooses by whether CUPTI loads there (`auto`: both built).
            in_model = (settings.gpu_timing != "alone" and target.time_dispatch_only
                        and target.device.startswith("cuda") and not session.workload.dispatch_benchmark)
            if not in_model:
                refuse_alone(session)
            # `auto`: the dispatch benchmark is built too, unless the dispatch cannot be timed alone.
            alone_too = in_model and settings.gpu_timing == "auto" and not untimed_alone(session)
            builder = builder_for(session.input_path, target, output_dir, session.ctx, settings, session.workload,
                                  in_model, alone_too)
            manifest = compile_to_manifest(candidates, builder, session.workload, output_dir, store, meta, progress)
            says = compiler_says_of_failures(session, candidates, [b.result for b in manifest.built])
            return Tuning(session.dispatch, tuple(candidates), (), None, None, output_dir, manifest, says)
        evaluator = session_evaluator(session, store, run, progress)
        if not evaluator.in_model:
            refuse_alone(session)
        evaluation = evaluator.evaluate(candidates)
    finally:
        store.close()
    return write_tuning(session, candidates, evaluation, list(evaluator.devices), given, search_meta)


def untimed_alone(session: Session) -> Optional[str]:
    """Why the session's dispatch cannot be timed alone (Pipeline.untimed_alone), or None."""
    return session.pipeline.untimed_alone(session.dispatch)


def refuse_alone(session: Session) -> None:
    """NotTimedAlone where this run would time the dispatch alone (a GPU's dumped dispatch
    benchmark, or a dispatch benchmark given as the input) and it cannot be."""
    why = untimed_alone(session)
    if why and (session.target.time_dispatch_only or session.workload.dispatch_benchmark):
        raise NotTimedAlone(f"{session.dispatch.name}: {why}")


def write_tuning(session: Session, candidates: list[Candidate], evaluation: Evaluation, devices: list[str], given: bool,
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
        meta={**run_meta(session, given), "devices": devices, "evaluation": evaluation.stats.to_json(),
              **({"search": search_meta} if search_meta else {})},
        annotations=annotations,
    )
    return Tuning(session.dispatch, tuple(candidates), evaluation.results, ranking, evaluation.stats, output_dir,
                  compiler_says=says, families=tuple(session.pipeline.families or ()))


def compiler_says_of_failures(session: Session, candidates: Sequence[Candidate],
                              results: Sequence[Result]) -> dict[int, list[str]]:
    """For each candidate that failed to build or whose config did not take, what IREE's own
    constraints for the dispatch say of its config: the messages of the assertions it breaks
    (with their values), or that they admit it. Empty where the compiler emits no constraints
    for the pipeline or its configs cannot be put in the compiler's knobs."""
    from tuner.problem.compiler import emitted_problems, problem_for
    from pipelines.base import NotInCompilerKnobs
    from tuner.problem.crosscheck import compiler_assignment
    from tuner.core.results import Status

    failed = {r.candidate_id for r in results
              if r.status in (Status.COMPILE_FAILED, Status.COMPILE_INTERRUPTED, Status.CONFIG_NOT_APPLIED)
              and not r.is_baseline}
    pipeline = session.pipeline
    base = pipeline.underlying
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
