"""The compile half of `tune-model` across two machines (`tune-model --compile-only`, then
`benchmark DIR` where the device is, in turn, until the model is done). Each call here does the
next compile step from what DIR holds and writes DIR/model-plan.json for the device
(tuner.stages.plan):

1. profile: the default program (with each dispatch's benchmark on GPUs) compiled;
2. dispatches: the chosen dispatches' config candidates compiled, one manifest each;
3. merge, once per dispatch winner in order of expected gain: the model with the configs kept so
   far plus this one, against the model without it (greedy, as on one machine);
4. validate: the tuned model against the default;
then model_spec.mlir, model_flags.txt and results.json. Model-wide flags and program rewrites
are not tried here (the flag stage runs where the device is: `tune-model` itself); the model is
tuned as given. On GPU targets each whole-model step carries this machine's llvm-cpu result of
the program, so a default that computes the model wrong (ResNet-50 on cuda in 3.13) is said and
no build that is wrong with it passes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

from tuner.build.manifest import MANIFEST, Manifest
from tuner.driver import Session, evaluate
from tuner.profiling.profile import prepare_profile
from tuner.profiling.timing import Profile
from tuner.run_dir import real_directory
from tuner.stages.base import ModelState, StageEnv
from tuner.stages.host_reference import host_reference
from tuner.core.settings import RunOptions, SearchSettings
from tuner.stages.builtin import DISPATCHES, dispatch_candidates, finished_tuning, tuning_outcome
from tuner.stages.selection import by_share, select_dispatches, tuning_pipeline
from tuner.stages.merge import greedy_merge
from tuner.stages.model_timing import Comparison
from tuner.stages.plan import PLAN, PROFILE_DIR, PROFILED, ModelPlan, measured_path
from tuner.stages.variants import BUILT_FROM, BuiltVariant


def _rel(env: StageEnv, path: Path) -> str:
    return str(path.resolve().relative_to(env.output_dir.resolve()))


def _plan(env: StageEnv, step: str, **fields) -> ModelPlan:
    inputs = [_rel(env, p) for p in env.inputs()]
    return ModelPlan(step, env.device, env.workload.to_json(), inputs, env.rounds, **fields)


def whole_model_plan(env: StageEnv, step: str, reference: BuiltVariant, trial: BuiltVariant, index: int) -> ModelPlan:
    """A whole-model step: the trial against the reference, with the host's result of the same
    program where the target is a GPU (built and run here, once per run: host_reference), so
    that the device checks both against it where the reference is off it."""
    host = host_reference(env)
    plan = _plan(env, step, reference=[reference.variant.name, _rel(env, reference.vmfb)],
                 variants=[[trial.variant.name, _rel(env, trial.vmfb)]], index=index, key=_pair_key(reference, trial),
                 host=_rel(env, host.result) if host else "")
    return replace(plan, files=[*plan.inputs, plan.reference[1], plan.variants[0][1], *([plan.host] if host else [])])


def profile_step(env: StageEnv) -> Optional[ModelPlan]:
    """The plan to profile the model, or None when its figures are here."""
    if (env.output_dir / PROFILED).is_file():
        return None
    job = prepare_profile(env.model, env.target, env.program, env.output_dir / PROFILE_DIR, env.ctx,
                          timeout_s=env.settings.run_timeout_s)
    files = [f"{PROFILE_DIR}/{job.module}", *(f"{PROFILE_DIR}/{p}" for ps in job.inputs.values() for p in ps),
             *(f"{PROFILE_DIR}/{m}" for m, _ in job.alone.values()),
             *([f"{PROFILE_DIR}/{job.launch[0]}"] if job.launch else [])]
    return ModelPlan("profile", env.device, {}, [], env.rounds, profile=job.to_json(), files=files)


def read_profile(env: StageEnv) -> Profile:
    return Profile.from_json(json.loads((env.output_dir / PROFILED).read_text()))


def advance(env: StageEnv, budget: int, min_share: float, top: Optional[int],
            search: SearchSettings = SearchSettings(), kinds: tuple[str, ...] = ()
            ) -> tuple[Optional[ModelPlan], ModelState]:
    """The next plan for the device (None when the model is done) and the state so far."""
    state = ModelState()
    chosen, untuned = select_dispatches(env.program, env.profile, env.workload, min_share, top, kinds,
                                        search.pipeline)
    outcomes, pending = list(untuned), []
    for lead, outcome in chosen:
        directory = env.output_dir / DISPATCHES / lead.name
        candidates, done = dispatch_candidates(lead, replace(search, budget=budget), env.target, env,
                                               env.output_dir / "results.sqlite")
        results = finished_tuning(directory, lead, candidates) if done else None
        if results is None:
            if _stale(directory, lead, candidates):
                env.say(f"compiling {len(candidates)} candidates of {lead.name} into {directory}")
                real_directory(directory)
                session = Session(env.model, env.target, directory, env.ctx, env.program.workload(lead, env.model),
                                   lead, tuning_pipeline(lead, search.pipeline), env.program)
                evaluate(session, candidates, RunOptions(env.settings, store_path=env.output_dir / "results.sqlite",
                                                         compile_only=True), env.progress)
            pending.append(_rel(env, directory))
            outcomes.append(replace(outcome, status="compiled, to be measured"))
        else:
            outcomes.append(tuning_outcome(outcome, lead, candidates, results))
    state = replace(state, dispatches=by_share(outcomes))
    if pending:
        files = [f for d in pending for f in _manifest_files(env.output_dir / d, env)]
        return _plan(env, "dispatches", dispatches=pending, files=files), state
    return merge_step(env, state, search.pipeline)


def _stale(directory: Path, dispatch, candidates) -> bool:
    """Whether the dispatch's manifest is missing, of another input, or of other candidates (a
    rerun with more --num-candidates compiles the new ones; the others keep their modules)."""
    manifest = Manifest.read_existing(directory)
    return (manifest is None or manifest.meta.get("input_digest") != dispatch.source_digest
            or {b.result.key for b in manifest.built} != {c.key for c in candidates})


def _manifest_files(directory: Path, env: StageEnv) -> list[str]:
    """What the device needs of a dispatch's manifest: the manifest and every module it times."""
    files = [_rel(env, directory / MANIFEST)]
    for b in Manifest.read(directory).built:
        if b.spec is not None:  # the winner's spec becomes the dispatch's best_spec.mlir there
            files.append(_rel(env, b.spec))
        # Where dispatches are timed alone (GPUs) only their benchmark modules travel: a model
        # module per candidate would be the model's weights each time. Numerics are then checked
        # at the model's output when a config is merged (tuner.stages.plan).
        module = b.dispatch_vmfb or b.vmfb
        if module is not None:
            files.append(_rel(env, module))
    return files


def merge_step(env: StageEnv, state: ModelState, pipeline: Optional[str] = None
               ) -> tuple[Optional[ModelPlan], ModelState]:
    """The greedy merge (tuner.stages.merge.greedy_merge) one device trip per step: a step's
    figures are the device's if they are of these very builds, else the step is the next plan."""
    def measured(step: str, reference: BuiltVariant, trial: BuiltVariant, index: int,
                 beside: tuple = ()) -> Optional[Comparison]:  # the device times the pair only
        path = env.output_dir / measured_path(step, index)
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        # Figures of other builds (a rerun with other winners) are measured again.
        return Comparison.from_json(data) if data.get("key") == _pair_key(reference, trial) else None

    pending, state = greedy_merge(env, state, measured, pipeline)
    if pending is None:
        return None, state
    step, reference, trial, index = pending
    return whole_model_plan(env, step, reference, trial, index), state


def _pair_key(reference: BuiltVariant, trial: BuiltVariant) -> str:
    """What the two modules were built from (their build stamps), as a short digest."""
    stamps = [(b.vmfb.parent / BUILT_FROM).read_text() for b in (reference, trial)]
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()[:16]


def next_step_message(plan: ModelPlan, output_dir: Path) -> str:
    what = {"profile": "time the model's dispatches", "dispatches": f"measure {len(plan.dispatches)} dispatches' "
            "candidates", "merge": f"time merge step {plan.index} on the model", "validate":
            "time the tuned model against the default"}[plan.step]
    return (f"next, where the device is: iree-tuner benchmark {output_dir} ({what}; it needs the {len(plan.files)} "
            f"files {PLAN} lists); then run this command again")
