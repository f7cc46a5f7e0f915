"""The built-in stages of model tuning:

- `FlagStage` (tuner.stages.flags): model-wide flags and program rewrites, decided on the
  whole model.
- `DispatchStage`: the dispatches that matter most by measured share, under the flags chosen,
  each tuned with the dispatch-level loop and result store (`tune`'s), one tuning per distinct
  shape (one matcher covers every occurrence), resumable from the run's directory.
- `MergeStage` (tuner.stages.merge): the winners merged into one spec.

Also the helpers the stages share: building a whole-model variant once per run, comparing
variants on the model, and when a paired figure is slower beyond the noise."""

from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from iree.compiler import ir

from pipelines import Dispatch
from tuner.driver import Session, search_and_evaluate
from tuner.core.built import Progress
from tuner.core.settings import Listeners, RunOptions, usable_cores
from tuner.run_dir import real_directory
from tuner.search.live import plan_search
from tuner.search.task import StoredMeasure, TuneTask
from tuner.core.settings import SearchSettings
from tuner.store import ResultStore
from tuner.versions import compiler_version, runtime_version
from tuner.core.comparison import WIN_SHARE, Paired
from tuner.evaluation.devices import distinct_gpus
from tuner.errors import NotTimedAlone, ToolError, UnusableBaseline
from tuner.strategies import CLUSTER
from tuner.store import STORE
from tuner.profiling.profile import kept_profile
from tuner.ranking import rank
from tuner.core.results import Result
from tuner.stages.base import DispatchOutcome, ModelState, StageEnv, discovered_program
from tuner.stages.host_reference import host_output, host_reference
from tuner.stages.ledger import BUILDS, DISCOVERY, SEARCHES, TIMINGS
from tuner.stages.selection import UNTUNED_FOR_TIME, by_share, select_dispatches, tuning_pipeline
from tuner.stages.model_timing import Comparison, compare
from tuner.stages.variants import (BuiltVariant, SpecPart, Variant, build_variant, carried, compile_variant,
                                   compiled_already)
from tuner.targets import Target
from tuner.stages.time_budget import eta, search_seconds

DISPATCHES = "dispatches"  # DIR/dispatches/NAME: each dispatch's own tuning
# Z3's default context is one per process and not thread-safe: where dispatches are tuned at once,
# their problems and spaces are built one at a time (the searches then run on plain arrays).
_PLANNING = threading.Lock()
VARIANTS = "variants"  # DIR/variants/NAME: each whole-model build


def with_flags(target: Target, flags: tuple[str, ...], pinned: Sequence[SpecPart] = ()) -> Target:
    """The target compiling with the model-wide flags too, and every build carrying the `pinned`
    configs (dispatches the compiler's own configs cannot build: tuner.stages.repair)."""
    if flags:
        target = replace(target, compile_flags=(*target.compile_flags, *flags))
    return replace(target, pinned=(*target.pinned, *(p.entry for p in pinned))) if pinned else target


def slower_beyond_noise(p: Paired) -> bool:
    """Slower than the reference in at least WIN_SHARE of the rounds (the mirror of a win)."""
    if not p.ratios:
        return False
    return sum(r < 1.0 for r in p.ratios) >= math.ceil(WIN_SHARE * len(p.ratios))


def _build_key(variant: Variant) -> tuple:
    return (variant.flags, variant.source,
            tuple((p.dispatch.name, p.config.compilation_info) for p in variant.spec_parts))


def build_once(env: StageEnv, variant: Variant) -> BuiltVariant:
    """The model built as `variant`, once per run (the stages share the default's build)."""
    variant = carried(variant, env.target)
    key = _build_key(variant)
    if key not in env.cache.builds:
        with env.ledger.timed(BUILDS):
            env.cache.builds[key] = build_variant(env.model, variant, env.target, env.output_dir / VARIANTS / variant.name,
                                                  env.ctx, env.settings.compile_timeout_s)
    return env.cache.builds[key]


def built_already(env: StageEnv, variant: Variant) -> bool:
    """Whether the model is built as `variant` in this run already: `build_once` would only
    read it back (a build `prebuild` made, or one `build_once` made or refused)."""
    return (_build_key(carried(variant, env.target)) in env.cache.builds
            or compiled_already(env.model, variant, env.target, env.output_dir / VARIANTS / variant.name))


def prebuild(env: StageEnv, variants: Sequence[Variant], phase: str = "builds") -> None:
    """Compile the variants (without spec parts) that are not built yet side by side, one
    iree-compile per four cores, so that `build_once` then only reads their configs back. Where
    there are fewer than eight cores it does nothing: one model build at a time already keeps
    them busy. ResNet-50's flag stage on the H100 machine (16 cores) built its 25 first choices
    one at a time, about 12 s each with their numerics."""
    workers = usable_cores() // 4
    todo = list({_build_key(v): v for v in variants if not v.spec_parts and _build_key(v) not in env.cache.builds}.values())
    if workers < 2 or len(todo) < 2:
        return

    def build(variant: Variant) -> tuple[Variant, BuiltVariant]:
        return variant, compile_variant(env.model, variant, env.target, env.output_dir / VARIANTS / variant.name,
                                        timeout_s=env.settings.compile_timeout_s)

    with env.ledger.timed(BUILDS, len(todo)), ThreadPoolExecutor(min(workers, len(todo)), "build") as pool:
        for done, (variant, built) in enumerate(pool.map(build, todo), 1):
            if not built.ok:  # kept as the build's outcome: not compiled again to fail again
                env.cache.builds[_build_key(variant)] = built
            if env.progress:
                env.progress(phase, done, len(todo))


def compare_on_model(env: StageEnv, reference: BuiltVariant, trials: list[BuiltVariant], directory: str,
                     rounds: Optional[int] = None) -> Comparison:
    """The trials against the reference on the whole model, interleaved (tuner.stages.model_timing),
    in `rounds` rounds (default: the run's; 0: their numerics only), dealt over the run's GPUs
    where it has several; one that did not build is named in `failed`."""
    built = [t for t in trials if t.ok]
    settings = replace(env.settings, check_numerics=True).module_run(env.device, env.workload, env.inputs(),
                                                                     env.devices)
    with env.ledger.timed(TIMINGS, len(built)):  # the host's reference, made inside, counted as its own
        cmp = compare((reference.variant.name, reference.vmfb), [(t.variant.name, t.vmfb) for t in built], settings,
                      env.rounds if rounds is None else rounds, env.output_dir / VARIANTS / directory, env.timer,
                      env.progress, host=host_output(env))
    if cmp.reference_check and reference.variant.name not in env.cache.reference_checks:
        env.cache.reference_checks[reference.variant.name] = cmp.reference_check
        env.say(f"numerics: {cmp.reference_check}")
    cmp.failed.update({t.variant.name: t.error or "did not build" for t in trials if not t.ok})
    if reference.variant.name == "default":
        env.default_ms.extend(t for t in cmp.reference_ms if t)
    return cmp


def default_off_host(env: StageEnv) -> str:
    """What compare_on_model found this run where the default's result is off llvm-cpu's (IREE
    3.13's CUDA builds of NCHW 1x1 convolutions, of batch matmuls over heads of 40): "" where it
    was not, or not compared."""
    return env.cache.reference_checks.get("default", "")


def gpu_lanes(env: StageEnv, dispatches: int) -> list[tuple[str, ...]]:
    """The GPUs of this host the run times on, dealt into one lane a dispatch, at most one a GPU
    (a lane holds several GPUs where there are fewer dispatches than GPUs: its searches' first
    passes are dealt over them); [] where there is one GPU or one dispatch, or the run times on
    the CPU (issue 62: on the H200 x4 a Llama layer's three searches took 53 s one after another)."""
    gpus = distinct_gpus(env.devices)
    lanes = min(len(gpus), dispatches)
    return [tuple(gpus[i::lanes]) for i in range(lanes)] if lanes > 1 else []


def lane_progress(progress: Optional[Progress], lane: tuple[str, ...]) -> Optional[Progress]:
    """A lane's progress, its phases named with its GPUs (`compile cuda://1`): the lanes' searches
    run at once, and one bar a phase would show both lanes' counts in turn."""
    if progress is None:
        return None
    return lambda phase, done, total: progress(f"{phase} {'+'.join(lane)}", done, total)


@dataclass
class DispatchStage:
    """Tune the dispatches that matter: each tunable one with at least `min_share` of the model's
    measured dispatch time (or the `top` largest), under the flags chosen, each by `search`
    (tuner.search) with a budget of `budget` evaluations. Config candidates only: flags
    are the model's (FlagStage)."""

    budget: int = 30  # evaluations per dispatch (the CLI's --budget)
    min_share: float = 0.02
    top: Optional[int] = None
    name: str = "dispatches"
    kinds: tuple[str, ...] = ()  # the dispatch kinds it tunes ("softmax", ...); empty: every kind
    search: SearchSettings = SearchSettings()
    directory: str = DISPATCHES  # DIR/directory/NAME: each dispatch's tuning
    # Seconds the stage's searches may take together (None: no limit): each dispatch's search
    # gets the time left in proportion to its share among the dispatches left; once it is spent,
    # no dispatch is started (each one left is said to be not tuned, and why).
    seconds: Optional[float] = None

    def run(self, state: ModelState, env: StageEnv) -> ModelState:
        target = with_flags(env.target, state.flags, state.pinned)
        program, measured = env.program, env.profile
        source = state.source_of(env.model)
        if state.flags or state.source:  # the dispatches change under model-wide choices: find and time them again
            program = discovered_program(env, source, state.flags).for_running(env.workload.parameters, env.dynamic_size)
            with env.ledger.timed(DISCOVERY):
                measured = kept_profile(source, target, program, env.output_dir / "profile-flags", env.ctx,
                                        env.settings, env.progress, env.say)
        chosen, outcomes = select_dispatches(program, measured, env.workload, self.min_share, self.top, self.kinds,
                                             self.search.pipeline)
        at_once = env.strategy == CLUSTER and len(chosen) > 1
        stage_seconds = self.seconds
        if env.budget is not None:  # the whole run's budget: what is left of it, less the merge's share
            shares = [o.share for _, o in chosen]
            largest = max(shares) if chosen and None not in shares else None
            stage_seconds = min(env.budget.dispatch_stage_seconds(largest), stage_seconds or float("inf"))
        deadline = None if stage_seconds is None else time.monotonic() + stage_seconds
        lanes = [] if at_once else gpu_lanes(env, len(chosen))
        if at_once:
            # On a cluster every dispatch is tuned at once: their compiles fill the compile nodes
            # together, and the benchmark workers time one thing at a time, whichever dispatch
            # it is of. Each tuning gets an MLIR context of its own (contexts are not shared
            # between threads); each opens its own connection to the store.
            for i, (lead, outcome) in enumerate(chosen, 1):
                self._say_dispatch(env, i, len(chosen), lead, outcome)
            env.say(f"tuning the {len(chosen)} dispatches at once on the Ray cluster")
            with ThreadPoolExecutor(max_workers=len(chosen), thread_name_prefix="dispatch") as pool:
                outcomes += list(pool.map(lambda item: self.tune_or_say(item[0], item[1], program, target,
                                                                        replace(env, ctx=ir.Context()), source),
                                          chosen))
        elif len(lanes) > 1:
            # Several GPUs of this host: the dispatches dealt over them, largest first, each lane
            # tuning its own in turn on its GPUs (its candidates paired with the baseline there),
            # with an MLIR context of its own; the lanes' compiles share the host's cores.
            env.say(f"tuning the {len(chosen)} dispatches {len(lanes)} at a time, one a GPU "
                    f"({', '.join('+'.join(lane) for lane in lanes)})")
            numbered = list(enumerate(chosen, 1))
            with ThreadPoolExecutor(max_workers=len(lanes), thread_name_prefix="dispatch-lane") as pool:
                ran = pool.map(lambda i: self._in_turn(numbered[i::len(lanes)], len(chosen), program, target,
                                                       replace(env, ctx=ir.Context(), devices=lanes[i],
                                                               progress=lane_progress(env.progress, lanes[i])),
                                                       source, deadline, stage_seconds), range(len(lanes)))
                outcomes += [o for lane in ran for o in lane]
        else:
            outcomes += self._in_turn(list(enumerate(chosen, 1)), len(chosen), program, target, env, source,
                                      deadline, stage_seconds)
        return replace(state, dispatches=by_share(outcomes))

    def _in_turn(self, numbered: list, total: int, program, target: Target, env: StageEnv, source: Path,
                 deadline: Optional[float], stage_seconds: Optional[float]) -> list[DispatchOutcome]:
        """The dispatches (numbered among the stage's `total`) tuned one after another on
        `env.devices`, each search given the time left to `deadline` in proportion to its share
        among those left in turn, and what it took said with the ETA of the rest."""
        outcomes, spent = [], []  # seconds each dispatch's tuning took, for the ETA
        for k, (i, (lead, outcome)) in enumerate(numbered):
            self._say_dispatch(env, i, total, lead, outcome)
            start = time.monotonic()
            seconds = None if deadline is None else search_seconds(
                deadline - start, [o.share for _, (_, o) in numbered[k:]])
            if seconds is not None and seconds <= 0:
                outcomes.append(self._out_of_time(lead, outcome, target, env, source, stage_seconds))
            else:
                outcomes.append(self.tune_or_say(lead, outcome, program, target, env, source, seconds))
            took = time.monotonic() - start
            if not outcomes[-1].reused:  # the pace of the dispatches left is that of those searched
                spent.append(took)
            env.say(f"  {lead.name}: {outcomes[-1].status}, {took:.0f} s"
                    + eta(spent, len(numbered) - k - 1, None if deadline is None else deadline - time.monotonic()))
        return outcomes

    def _say_dispatch(self, env: StageEnv, i: int, total: int, lead: Dispatch, outcome: DispatchOutcome) -> None:
        pipeline = tuning_pipeline(lead, self.search.pipeline)
        env.say(f"dispatch {i}/{total}: {lead.name} ({lead.shape_name}"
                + (f", {100 * outcome.share:.0f}% of the time" if outcome.share is not None else "")
                + (f"; {pipeline.name}" if self.search.pipeline else "") + ")")

    def tune_or_say(self, dispatch: Dispatch, outcome: DispatchOutcome, program, target: Target, env: StageEnv,
                    source: Path, seconds: Optional[float] = None) -> DispatchOutcome:
        """`tune`, with a tuning that cannot go on (its baseline failed to build, run or be timed,
        or gives a result that is not finite; or it cannot be timed as this run times it) as the
        dispatch's outcome: the model's other dispatches are still tuned."""
        try:
            return self.tune(dispatch, outcome, program, target, env, source, seconds)
        except (ToolError, UnusableBaseline, NotTimedAlone) as e:
            return replace(outcome, status=f"not tuned: {e}")

    def _out_of_time(self, dispatch: Dispatch, outcome: DispatchOutcome, target: Target, env: StageEnv,
                     source: Path, stage_seconds: float) -> DispatchOutcome:
        """A dispatch reached once the stage's time is spent: its tuning as an earlier run
        finished it, which costs nothing (Swin-T resumed on the H200 past its dispatch stage's
        time threw its three finished tunings away and kept the default); else not tuned, said
        in the budget's verdict."""
        try:
            earlier = self.finished(dispatch, outcome, target, env, source)
        except ToolError:  # not readable as this tuning's: not tuned, as any other
            earlier = None
        if earlier is not None:
            return earlier
        if env.budget is not None:
            env.budget.skip(f"tuning {dispatch.name}")
        return replace(outcome, status=f"{UNTUNED_FOR_TIME} {stage_seconds:.0f} s were spent")

    def finished(self, dispatch: Dispatch, outcome: DispatchOutcome, target: Target, env: StageEnv,
                 source: Path) -> Optional[DispatchOutcome]:
        """The dispatch's tuning as an earlier run in the directory finished it, or None (none
        finished, or not readable as this tuning's: the search never runs here)."""
        with _PLANNING:
            candidates, done = dispatch_candidates(dispatch, replace(self.search, budget=self.budget), target, env,
                                                   env.store_path or env.output_dir / STORE, source)
        results = finished_tuning(env.output_dir / self.directory / dispatch.name, dispatch, candidates) if done else None
        if results is None:
            return None
        env.say(f"  {dispatch.name}: reusing its finished tuning in {env.output_dir / self.directory / dispatch.name}")
        return replace(tuning_outcome(outcome, dispatch, candidates, results), reused=True)

    def tune(self, dispatch: Dispatch, outcome: DispatchOutcome, program, target: Target,
             env: StageEnv, source: Path, seconds: Optional[float] = None) -> DispatchOutcome:
        """Tune one dispatch of `program` (discovered in `source`) under `target`'s flags, or reuse
        the finished tuning of an earlier run; `outcome` says what the tuning found. `seconds`:
        its search's time, at most (the search's own limit holds too)."""
        directory = env.output_dir / self.directory / dispatch.name
        real_directory(directory)
        earlier = self.finished(dispatch, outcome, target, env, source)
        if earlier is not None:
            return earlier
        search = replace(self.search, budget=self.budget)
        if seconds is not None:
            search = replace(search, seconds=min(seconds, search.seconds or seconds))
        store_path = env.store_path or env.output_dir / STORE
        with _PLANNING:
            pipeline = _pipeline(dispatch, search, target, env, source)
            plan = plan_search(dispatch, pipeline, search, without_flags=True)
        session = Session(source, target, directory, env.ctx, program.workload(dispatch, source),
                          dispatch, pipeline, program)
        with env.ledger.timed(SEARCHES):
            tuning = search_and_evaluate(session, plan, RunOptions(env.settings, env.strategy, tuple(env.devices),
                                                                   store_path, host_reference=host_reference(env)),
                                         Listeners(env.progress))
        candidates, results = list(tuning.candidates), list(tuning.results)
        base = next((r for r in results if r.is_baseline and r.ok and r.error), None)
        if base is not None:  # the default computes it wrong (tuner.evaluation.measure.Measurer)
            env.say(f"  {dispatch.name}: the default's {base.error.removeprefix('its ')}")
        return tuning_outcome(outcome, dispatch, candidates, results)


def dispatch_candidates(dispatch: Dispatch, search: SearchSettings, target: Target, env: StageEnv,
                        store_path: Path, source: Optional[Path] = None) -> tuple[list, bool]:
    """The baseline and the configs the search has proposed so far for the dispatch, replayed
    against what the store holds (tuner.search.task.StoredMeasure), and whether the search is done. No flag
    candidates: flags are the model's. `source`: the program the dispatch is of (the model's)."""
    pipeline = _pipeline(dispatch, search, target, env, source)
    plan = plan_search(dispatch, pipeline, search, without_flags=True)
    with ResultStore(store_path, compiler_version(), runtime_version()) as store:
        ran = TuneTask(dispatch, pipeline, env.ctx, target.spec_entry, plan, StoredMeasure(store), target.pinned).run()
    return list(ran.candidates), ran.done


def _pipeline(dispatch: Dispatch, search: SearchSettings, target: Target, env: StageEnv,
              source: Optional[Path] = None):
    """The dispatch's pipeline, reading its valid configs from the search's constraint source."""
    from tuner.problem.sources import with_constraints

    return with_constraints(search.constraints, tuning_pipeline(dispatch, search.pipeline), dispatch,
                            source or env.model, target, env.ctx, dispatch.flags, search.budget)


def finished_tuning(directory: Path, dispatch: Dispatch, candidates) -> Optional[list[Result]]:
    """The results of this dispatch's tuning if an earlier run finished it with these candidates
    (a killed tune-model resumes after the dispatches it finished)."""
    try:
        data = json.loads((directory / "results.json").read_text())
    except (OSError, ValueError):
        return None
    keys = {c.key for c in candidates}
    try:
        if data.get("input_digest") != dispatch.source_digest or \
                {r.get("key") for r in data.get("candidates", [])} != keys:
            return None
        return [Result.from_json(r) for r in data["candidates"]]
    except (AttributeError, KeyError, TypeError, ValueError):  # not as this tuner wrote it: tuned again
        return None


def tuning_outcome(outcome: DispatchOutcome, dispatch: Dispatch, candidates, results: list[Result]) -> DispatchOutcome:
    ranking = rank(results)
    base = ranking.baseline
    # The timing identity says what a time is of (tuner.evaluation.device_identity).
    timed = "" if base is None else "model call" if "entry function" in base.timing else "dispatch"
    if ranking.best is None:
        return replace(outcome, status="no winner", default_ms=base.median_ms if base else None, timed=timed)
    best = ranking.best
    candidate = next(c for c in candidates if c.key == best.key)
    return replace(outcome, status="tuned", default_ms=base.median_ms if base else None, tuned_ms=best.median_ms,
                   speedup=best.speedup, part=SpecPart(dispatch, candidate.config, candidate.label), timed=timed)
