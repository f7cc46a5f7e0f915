"""`tune-model`, the built-in client for whole models: find and profile the model's dispatches
once, then run the stages (model-wide flags, the dispatches that matter, the merge validated on
the model) and write one spec and one flags file that plain iree-compile uses."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from tuner.api import PROFILE
from tuner.driver import read_program
from pipelines import PIPELINES, DispatchKind, known_pipeline
from tuner.errors import InputError, OutputError
from tuner.external.triton_build import cache_in
from tuner.evaluation.devices import on_every_gpu
from tuner.evaluation.device_calls import timing_apart
from tuner.profiling.profile import kept_profile
from tuner.report.outputs import by_reason, comment, rebuild_command, response_file
from tuner.run_dir import RunDirectory, run_identity, write_file
from tuner.core.settings import Listeners, RunOptions, SearchSettings
from tuner.specs.transform import build_spec, uses_codegen_stage
from tuner.stages.base import ModelState, Stage, StageEnv, run_stages
from tuner.stages.builtin import DispatchStage
from tuner.stages.merge import MergeStage
from tuner.stages.flags import FlagStage
from tuner.stages.kernel_tiles import KernelTileStage
from tuner.stages.model_timing import ModelBenchmark, iree_benchmark, model_timer, timing_method
from tuner.stages.plan import PLAN, ModelPlan
from tuner.stages.time_budget import RECORD as BUDGET_RECORD, TimeBudget
from tuner.stages.unbuildable import buildable_start
from tuner.stages.two_machine import advance, next_step_message, profile_step, read_profile
from tuner.stages.variants import Variant, carried, merged_spec
from tuner.targets import Target, check_devices, parse_target
from tuner.discovery.workload import Workload

MODEL_SPEC = "model_spec.mlir"
MODEL_FLAGS = "model_flags.txt"
MODEL_RUN = "(model)"  # the run identity's dispatch: a whole-model run


@dataclass(frozen=True)
class ModelTuning:
    state: ModelState
    output_dir: Path
    program_path: Path  # what iree-compile takes (the user's MLIR, or an ONNX model's import)
    entry: str
    next_plan: Optional[ModelPlan] = None  # compile-only: what the device measures next (None: done)
    parameters: tuple[str, ...] = ()  # the model's external parameters (SCOPE=FILE), which running it needs


def default_stages(budget: int = 30, min_share: float = 0.02, top: Optional[int] = None,
                   model_flags: bool = True, search: SearchSettings = SearchSettings(),
                   kinds: tuple[str, ...] = (), dispatch_seconds: Optional[float] = None,
                   kernel_tiles: bool = False) -> list[Stage]:
    """tune-model's stages: model-wide flags (unless `model_flags` is off), the external kernels'
    tiles where the flags chose some (`kernel_tiles`: on cuda; tuner.stages.kernel_tiles), then the dispatches that matter
    (of the `kinds` asked for, every kind if none; each searched by `search` within `budget`
    evaluations, all of them within `dispatch_seconds`), then the merge."""
    return [*([FlagStage(tune_budget=min(FlagStage.tune_budget, budget), search=search)] if model_flags else []),
            *([KernelTileStage()] if model_flags and kernel_tiles else []),
            DispatchStage(budget, min_share, top, search=search, kinds=kinds, seconds=dispatch_seconds),
            MergeStage(pipeline=search.pipeline)]


def model_entry(program, measured) -> Workload:
    """The function the model is: the public one whose dispatches take the most measured time
    (by FLOPs without a profile)."""
    totals: dict[str, float] = {}
    workloads: dict[str, Workload] = {}
    for d in program.dispatches:
        w = program.entries.get(d.name)
        if isinstance(w, Workload):
            workloads[w.entry] = w
            t = measured.times.get(d.name) if measured else None
            totals[w.entry] = totals.get(w.entry, 0.0) + (t.total_ms if t else d.flops * 1e-12)
    if not totals:
        dynamic = [name for name, why in program.skipped if "dynamic shapes" in why]
        if dynamic and len(dynamic) == len(program.skipped) and not program.dispatches:
            raise InputError(f"every dispatch of the model has dynamic shapes ({len(dynamic)}: {', '.join(dynamic)}), "
                             f"which this tuner cannot tune yet: nothing to tune")
        raise InputError("no public function of the model runs a dispatch this tuner can read")
    return workloads[max(totals, key=totals.get)]


@dataclass(frozen=True)
class ModelOptions:
    """What tune-model decides beyond each dispatch's tuning: the dispatches it tunes (those with
    at least `min_share` of the model's dispatch time, or the `top` largest), the interleaved
    rounds of each whole-model comparison, whether the target's model-wide flags are tried first,
    and how the whole model is timed (a client may bring its own `timer`; None: model_timer's
    choice for the device)."""

    min_share: float = 0.02
    top: Optional[int] = None
    rounds: int = 4
    model_flags: bool = True
    timer: Optional[ModelBenchmark] = None
    kinds: tuple[str, ...] = ()  # the dispatch kinds to tune (DispatchKind values); empty: every kind
    dispatch_seconds: Optional[float] = None  # the dispatch stage's searches together, at most (None: no limit)
    # The whole run, at most, spread over the stages (tuner.stages.time_budget; None: no limit).
    time_budget_s: Optional[float] = None

    def checked(self) -> "ModelOptions":
        if not 0.0 <= self.min_share <= 1.0:
            raise InputError(f"--min-share {self.min_share}: a fraction between 0 and 1")
        if self.top is not None and self.top < 1:
            raise InputError("--top must be at least 1")
        if self.dispatch_seconds is not None and self.dispatch_seconds <= 0:
            raise InputError(f"--dispatch-time {self.dispatch_seconds}: a number of seconds above 0")
        if self.time_budget_s is not None and not 0 < self.time_budget_s < float("inf"):
            raise InputError(f"--time-budget {self.time_budget_s}: a number of seconds above 0")
        known = [k.value for k in DispatchKind]
        unknown = [k for k in self.kinds if k not in known]
        if unknown:
            raise InputError(f"--kinds {','.join(unknown)}: unknown; the kinds are {', '.join(known)}")
        return self


# The pipeline a whole model's dispatches are tuned with where it takes them, by target kind,
# where --pipeline names none. On cuda, the mma.sync kernel (f16 matmuls and batch matmuls, and
# the im2col convolutions' matmuls): on the H100 every model tuned with it ran faster than with
# TileAndFuse alone (by wall time: a BERT-large layer 1.76x against 1.53x, a Llama-style block
# 1.87x against 1.41x, two UNet ResNet blocks 2.46x and 2.06x against 1.94x and 1.61x, the last
# three against earlier sessions' TileAndFuse runs: BENCHMARKS.md).
DEFAULT_MODEL_PIPELINE = {"cuda": "llvmgpu_mma_sync"}


def model_pipeline(target: Target, named: Optional[str]) -> Optional[str]:
    """The pipeline tune-model tunes each dispatch it takes with: the one named (--pipeline),
    else the target kind's default (DEFAULT_MODEL_PIPELINE), else None (the compiler's)."""
    return named if named is not None else DEFAULT_MODEL_PIPELINE.get(target.name.split(":")[0])


def tune_model(input_path: Path | str, target: Target | str = "llvm-cpu", output_dir: Path | str = "model-tuning",
               search: SearchSettings = SearchSettings(), run: RunOptions = RunOptions(),
               model: ModelOptions = ModelOptions(), listen: Listeners = Listeners(),
               stages: Optional[Sequence[Stage]] = None) -> ModelTuning:
    """Tune a whole model with `stages` (default: `default_stages`, each dispatch searched by
    `search`): the run's directory is locked, the model discovered and profiled once
    (DIR/profile), each stage run in turn, and DIR/model_spec.mlir, DIR/model_flags.txt and
    DIR/results.json written. Rerun with the same directory to resume: finished dispatch
    tunings and stored results are reused.

    With `run.compile_only`, do the next compile step of the two-machine sequence from what the
    directory holds (tuner.stages.two_machine) and leave DIR/model-plan.json for `benchmark DIR`
    on the device; `ModelTuning.next_plan` says what it is (None once the model is done)."""
    search, model = search.checked(), model.checked()
    if search.pipeline is not None and not known_pipeline(search.pipeline):
        raise InputError(f"--pipeline {search.pipeline}: unknown; known: {', '.join(PIPELINES)}")
    if run.inputs:
        raise InputError("tune-model generates the model's inputs; --input is for `tune`")
    if run.compile_only and model.time_budget_s is not None:
        raise InputError("--time-budget bounds a run done on one machine, not a --compile-only step")
    target = parse_target(target) if isinstance(target, str) else target
    check_devices(target, run.devices)
    run = on_every_gpu(run, target.device)
    output_dir = Path(output_dir)
    say = listen.say
    if len(run.devices) > 1:
        say(f"timing on {len(run.devices)} devices: {', '.join(run.devices)} (each candidate against the baseline "
            f"on its own device)")
    chosen = model_pipeline(target, search.pipeline)
    if chosen != search.pipeline:
        search = replace(search, pipeline=chosen)
        say(f"{target.name}: each dispatch {search.pipeline} takes is tuned with it, the others with the compiler's "
            f"pipeline (--pipeline llvmgpu_tile_and_fuse: the compiler's for every one)")
    with RunDirectory(output_dir, run_identity(Path(input_path), target.name, MODEL_RUN, search.pipeline), run.force), \
            cache_in(output_dir), timing_apart(run.devices):  # Triton's cache; several GPUs: a process each
        # The whole run's seconds; a stopped run resumed here goes on with what it left of them.
        budget = (TimeBudget(model.time_budget_s, record=output_dir / BUDGET_RECORD)
                  if model.time_budget_s is not None else None)
        source, target, _, ctx, program = read_program(input_path, target, output_dir, run.parameters, run.dynamic_size)
        for line in skipped_lines(program.skipped):
            say(line)
        for line in (program.fixed_text(), program.repaired_text()):
            if line:
                say(line)
        env = StageEnv(source, target, output_dir, ctx, program, model_entry(program, None), run.settings,
                       Path(run.store_path) if run.store_path else None, tuple(run.devices),
                       model.timer or model_timer(run.devices[0] if run.devices else target.device,
                                                  run.settings.gpu_timing),
                       listen.progress, say, None, model.rounds, strategy=run.strategy, dynamic_size=run.dynamic_size,
                       budget=budget)
        if run.compile_only:
            return _compile_step(replace(env, devices=(), timer=iree_benchmark, strategy="auto"), model, search)
        # A model IREE's defaults cannot build or run starts from a model-wide choice that can.
        env, start = buildable_start(env, search.pipeline)
        source, target, program = env.model, env.target, env.program
        measured = kept_profile(source, target, program, output_dir / PROFILE, ctx, run.settings, listen.progress, say)
        workload = model_entry(program, measured)
        say(f"model entry @{workload.entry}: {len(program.dispatches)} dispatches read, "
            f"{measured.entry_ms.get(workload.entry, 0.0):.3f} ms per call ({measured.method})")
        env = replace(env, workload=workload, profile=measured)
        state = run_stages(stages if stages is not None else
                           default_stages(search.budget, model.min_share, model.top, model.model_flags, search,
                                          model.kinds, model.dispatch_seconds, target.device.startswith("cuda")), env)
        if budget is not None and budget.undone:
            state = replace(state, verdict=state.verdict + budget.verdict_text())
        if start:
            state = replace(state, verdict=f"{start}; {state.verdict}")
        write_model_outputs(env, state)
        if budget is not None:
            budget.finish()
    return ModelTuning(state, output_dir, state.source_of(source), workload.entry, parameters=workload.parameters)


def _compile_step(env: StageEnv, model: ModelOptions, search: SearchSettings) -> ModelTuning:
    """One step of the two-machine sequence (tuner.stages.two_machine)."""
    plan = profile_step(env)
    state = ModelState()
    if plan is None:
        measured = read_profile(env)
        env = replace(env, workload=model_entry(env.program, measured), profile=measured)
        plan, state = advance(env, search.budget, model.min_share, model.top, search, model.kinds)
    if plan is not None:
        plan.write(env.output_dir)
        env.say(next_step_message(plan, env.output_dir))
        return ModelTuning(state, env.output_dir, env.model, env.workload.entry, plan)
    (env.output_dir / PLAN).unlink(missing_ok=True)
    write_model_outputs(env, state)
    return ModelTuning(state, env.output_dir, env.model, env.workload.entry, parameters=env.workload.parameters)


def write_model_outputs(env: StageEnv, state: ModelState) -> None:
    """model_spec.mlir (the kept configs merged, or an empty spec saying why there are none),
    model_flags.txt (every flag that rebuilds the tuned model) and results.json."""
    out = env.output_dir
    spec_path = out / MODEL_SPEC
    flags = [*env.target.compile_flags, *state.flags]
    program = state.source_of(env.model)
    header = comment(f"iree-tuner tune-model: {state.verdict}") + comment(
        f"rebuild: {rebuild_command(out, str(program), MODEL_FLAGS, env.workload.parameters)}")
    try:
        # The kept configs, and those the model needs to build at all (tuner.stages.repair).
        parts = carried(Variant("tuned", parts=state.kept, pinned=state.pinned), env.target).spec_parts
        pinned = [{"dispatch": p.dispatch.name, "config": p.label} for p in parts if p not in state.kept]
        if parts:
            write_file(spec_path, header + merged_spec(parts, env.target, env.ctx))
            flags += env.target.spec_flags(str(spec_path.resolve()),
                                           codegen=uses_codegen_stage([p.config for p in parts]))
        else:
            write_file(spec_path, header + str(build_spec([], env.ctx, env.target.spec_entry)))
        write_file(out / MODEL_FLAGS, response_file(flags))
        payload = {
            "kind": "model",
            "input": str(program.resolve()),
            "model": str(env.model.resolve()),
            "rewrites": list(state.rewrites),
            "target": env.target.name,
            "entry": env.workload.entry,
            **({"parameters": list(env.workload.parameters)} if env.workload.parameters else {}),
            "flags": list(state.flags),
            "flag_trials": state.flag_trials,
            **({"time_budget": {"seconds": env.budget.seconds, "spent": round(env.budget.spent(), 1),
                                "undone": list(env.budget.undone)}} if env.budget is not None else {}),
            "dispatches": [o.to_json() for o in state.dispatches],
            "kept": [p.dispatch.name for p in state.kept],
            **({"pinned": pinned} if pinned else {}),
            "figure": state.figure.to_json() if state.figure else None,
            "verdict": state.verdict,
            "notes": list(state.notes),
            "stage_seconds": state.stage_seconds,
            "stage_work": {stage: {kind: {"count": n, "seconds": s} for kind, (n, s) in work.items()}
                           for stage, work in state.stage_work.items()},
            "profile_method": env.profile.method if env.profile else "",
            "timing_method": timing_method(env.timer, env.inputs),
        }
        write_file(out / "results.json", json.dumps(payload, indent=2))
    except OSError as e:
        raise OutputError(f"cannot write the outputs to {out}: {e.strerror or e}") from None


def skipped_lines(skipped, shown: int = 3) -> list[str]:
    """The dispatches discovery skipped, one line per reason (in the order first met), each
    naming its first `shown` dispatches: DenseNet-121's 117 copies into slices were 117 lines of
    one reason (the `dispatches` command lists each with its reason)."""
    return [f"skipped {line}" for line in by_reason(skipped, shown)]
