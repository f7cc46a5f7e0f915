"""The device half of `tune-model` across two machines: `DIR/model-plan.json` says what the
compile machine needs measured next, `run_plan` measures it where the device is and leaves the
figures in DIR for the next `tune-model --compile-only`. Runtime-only (numpy and IREE's runtime
tools), like `benchmark DIR` for one dispatch.

Steps, in the order a model goes through them:
- `profile`: the default program's dispatches and entry timed (tuner.profiling.timing);
- `dispatches`: each chosen dispatch's compiled candidates, one manifest per directory, measured
  as `benchmark DIR` measures one (tuner.benchmark_dir);
- `merge`: the model with one more dispatch config against the model without it;
- `validate`: the tuned model against the default.
Each whole-model step times the builds it names in interleaved rounds (tuner.stages.model_timing)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from tuner.benchmark_dir import benchmark_dir
from tuner.store import STORE
from tuner.errors import InputError, OutputError
from tuner.core.names import is_file_name
from tuner.input.parameters import on_this_machine
from tuner.profiling.timing import ProfileJob, time_profile
from tuner.run_dir import RunDirectory, real_directory, write_file
from tuner.core.settings import EvalSettings
from tuner.stages.model_timing import compare
from tuner.discovery.workload import Workload

PLAN = "model-plan.json"
PROFILED = "profile/measured.json"
PROFILE_DIR = "profile"


def measured_path(step: str, index: int = 0) -> str:
    """Where a whole-model step's figures go (relative to DIR)."""
    return f"variants/measured-{step}{'-' + str(index) if step == 'merge' else ''}.json"


STEPS = ("profile", "dispatches", "merge", "validate")
MAX_ROUNDS = 1000  # interleaved rounds of a whole-model step, at most


@dataclass(frozen=True)
class ModelPlan:
    step: str  # "profile", "dispatches", "merge" or "validate"
    device: str
    workload: dict  # the model's entry (Workload.to_json)
    inputs: list[str]  # its input files, relative to DIR
    rounds: int = 4
    profile: Optional[dict] = None  # step "profile": the ProfileJob (paths relative to DIR/profile)
    dispatches: list[str] = field(default_factory=list)  # step "dispatches": directories with a manifest
    reference: Optional[list] = None  # whole-model steps: [name, module relative to DIR]
    variants: list[list] = field(default_factory=list)  # [[name, module], ...]
    index: int = 0  # which merge step
    key: str = ""  # whole-model steps: what the two builds were built from, copied into the figures
    # Whole-model steps on GPU targets: the compile machine's llvm-cpu result of the same program
    # on the same inputs (.npy relative to DIR; tuner.stages.host_reference), which every build is
    # checked against where the reference's own result is off it; "": none.
    host: str = ""
    files: list[str] = field(default_factory=list)  # every file the step reads, relative to DIR

    def write(self, root: Path) -> None:
        write_file(root / PLAN, json.dumps(self.__dict__, indent=2))

    @classmethod
    def read(cls, root: Path) -> "ModelPlan":
        if not (root / PLAN).is_file():
            raise InputError(f"{root}: no pending tune-model step (no {PLAN}); run `iree-tuner tune-model MODEL "
                             f"--compile-only --output {root}` first")
        try:
            data = json.loads((root / PLAN).read_text())
            plan = cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
            plan._check_types(root)
            if plan.step == "profile":
                ProfileJob.from_json(plan.profile)  # every field there
            outside = ([p for p in plan.paths() if not _inside(root, p)]
                       + [p for p in plan.profile_paths() if not _inside(root / PROFILE_DIR, p)])
        except (OSError, ValueError, TypeError, AttributeError, IndexError) as e:
            raise InputError(f"{root / PLAN}: not a readable model plan ({e})") from None
        if outside:
            raise InputError(f"{root / PLAN}: names a path outside {root} ({outside[0]!r}); a plan only names files "
                             "inside its directory")
        plan._check_values(root)
        return plan

    def _check_types(self, root: Path) -> None:
        """Each field of the kind a compile step writes (a list of strings, a workload object,
        a [name, module] pair): anything else is one error line, not a traceback later."""
        def strings(value) -> bool:
            return isinstance(value, list) and all(isinstance(v, str) for v in value)

        pair = lambda v: strings(v) and len(v) == 2  # noqa: E731
        wrong = next((name for name, ok in (
            ("files", strings(self.files)), ("inputs", strings(self.inputs)), ("dispatches", strings(self.dispatches)),
            ("workload", isinstance(self.workload, dict)), ("profile", self.profile is None or isinstance(self.profile, dict)),
            ("reference", self.reference is None or pair(self.reference)),
            ("variants", isinstance(self.variants, list) and all(pair(v) for v in self.variants)),
            ("host", isinstance(self.host, str)), ("key", isinstance(self.key, str))) if not ok), None)
        if wrong is not None:
            raise InputError(f"{root / PLAN}: the {wrong} {getattr(self, wrong)!r} is not one a compile step writes; "
                             "compile the step again")

    def _check_values(self, root: Path) -> None:
        """The plan's values that are not paths, as a compile step writes them: a known step,
        rounds and a merge index that are integers in range, names that are plain names (they
        become file names under DIR)."""
        def bad(what: str, value) -> InputError:
            return InputError(f"{root / PLAN}: {what} {value!r} is not one a compile step writes; compile the step again")

        if self.step not in STEPS:
            raise bad("the step", self.step)
        for what, value, top in (("rounds", self.rounds, MAX_ROUNDS), ("index", self.index, 10_000)):
            if isinstance(value, bool) or not isinstance(value, int) or not (what == "index" or value >= 1) \
                    or not 0 <= value <= top:
                raise bad(what, value)
        names = [n for n, _ in self.variants] + ([self.reference[0]] if self.reference else [])
        job = self.profile or {}
        names += [*job.get("inputs", {}), *job.get("alone", {})]
        for name in names:
            if not is_file_name(name):
                raise bad("the name", name)
        for directory in self.dispatches:  # each a directory below DIR, never DIR itself
            if (root / directory).resolve() == root.resolve():
                raise bad("the dispatch directory", directory)
        if self.step in ("merge", "validate") and self.reference is None:  # what the builds are timed against
            raise bad("the reference", self.reference)

    def paths(self) -> list[str]:
        """Every path the plan names relative to its directory (the profile job's: profile_paths)."""
        named = [*self.files, *self.inputs, *self.dispatches, *([self.host] if self.host else [])]
        if self.reference:
            named.append(self.reference[1])
        named += [module for _, module in self.variants]
        return [str(p) for p in named]

    def profile_paths(self) -> list[str]:
        """Every path the profile job names, relative to DIR/PROFILE_DIR."""
        job = self.profile or {}
        named = (ProfileJob.module_of(job), *(p for ps in job.get("inputs", {}).values() for p in ps),
                 *(m for m, _ in job.get("alone", {}).values()), *(job.get("launch") or [])[:1])
        return [str(p) for p in named if p]

    @property
    def measured(self) -> str:
        """Where this step's figures go (relative to DIR)."""
        return PROFILED if self.step == "profile" else measured_path(self.step, self.index)


def run_plan(root: Path, devices: Sequence[str] = (), settings: EvalSettings = EvalSettings(),
             progress: Optional[Callable[[str, int, int], None]] = None, strategy: str = "auto",
             parameters: Sequence[str] = ()) -> ModelPlan:
    """Measure what DIR's model plan asks for, on `devices` (default: the plan's device). With
    `strategy` "ray", a dispatch step's dispatches are timed at once on the Ray cluster's benchmark
    workers; a profile or a whole-model comparison stays on this machine (the comparison's variants
    dealt over `devices` where they are several GPUs).
    The model reads the external parameters the plan records, or `parameters` (parsed) in place
    of those of the same scope."""
    with RunDirectory(root):  # one run at a time in DIR
        return _run_plan(root, devices, settings, progress, strategy, tuple(parameters))


def _run_plan(root: Path, devices: Sequence[str], settings: EvalSettings,
              progress: Optional[Callable[[str, int, int], None]], strategy: str,
              parameters: tuple[str, ...]) -> ModelPlan:
    plan = ModelPlan.read(root)
    recorded = tuple(plan.workload.get("parameters", ()))
    if recorded or parameters:
        here = on_this_machine(recorded, parameters, f"{root / PLAN}'s model")
        plan = replace(plan, workload={**plan.workload, "parameters": list(here)},
                       profile={**plan.profile, "parameters": list(here)} if plan.profile else plan.profile)
    missing = [f for f in plan.files if not (root / f).exists()]
    if missing:
        raise InputError(f"{root / PLAN}: {len(missing)} of the files it needs are not here (first: {missing[0]}); "
                         "copy the whole directory (or `iree-tuner pack`) from the compile machine")
    device = devices[0] if devices else plan.device
    if plan.step == "profile":
        job = ProfileJob.from_json({**plan.profile, "device": device})
        measured = time_profile(job, root / PROFILE_DIR, progress)
        _write(root / plan.measured, measured.to_json())
    elif plan.step == "dispatches":
        # Only each dispatch's benchmark module travels (tuner.stages.two_machine): its numerics
        # are checked at the model's output when its config is merged.
        unchecked = replace(settings, check_numerics=False)
        if strategy == "ray":
            with ThreadPoolExecutor(max_workers=max(1, len(plan.dispatches))) as pool:
                list(pool.map(lambda d: benchmark_dir(root / d, devices, unchecked, progress, root / STORE, strategy,
                                                      parameters), plan.dispatches))
        else:
            for d in plan.dispatches:
                benchmark_dir(root / d, devices, unchecked, progress, root / STORE, parameters=parameters)
    elif plan.step in ("merge", "validate"):
        name, module = plan.reference
        module_run = replace(settings, check_numerics=True).module_run(
            device, Workload.from_json(plan.workload), tuple(root / p for p in plan.inputs), devices)
        cmp = compare((name, root / module), [(n, root / m) for n, m in plan.variants], module_run, plan.rounds,
                      root / "variants" / f"runs-{plan.step}", progress=progress, host=_host_result(root, plan))
        _write(root / plan.measured, {**cmp.to_json(), "key": plan.key})
    else:
        raise InputError(f"{root / PLAN}: unknown step {plan.step!r}")
    return plan


def _host_result(root: Path, plan: ModelPlan) -> Optional[np.ndarray]:
    """The compile machine's llvm-cpu result the plan names, or None where it names none."""
    if not plan.host:
        return None
    try:
        return np.load(root / plan.host, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"{root / plan.host}: not the host's result as a compile step writes it ({e}); "
                         "compile the step again") from None


def pack(root: Path, dest: Path) -> list[str]:
    """Copy what the device needs for DIR's pending step (the plan and the files it lists, nothing
    else: a model's earlier builds stay behind) into `dest`; returns the files copied. Measure
    there with `benchmark DEST`, then copy DEST back over DIR."""
    plan = ModelPlan.read(root)
    here, there = root.resolve(), dest.resolve()
    if there == here or there.is_relative_to(here) or here.is_relative_to(there):
        raise InputError(f"{dest}: the copy must go outside {root} (and not hold it)")
    if there.exists() and (not there.is_dir() or any(there.iterdir())):
        raise OutputError(f"{dest}: not an empty directory; pack into a new one (nothing is merged into another)")
    files = [PLAN, *plan.files]
    if plan.step == "dispatches" and (root / STORE).is_file():
        files.append(STORE)  # results measured there before are reused, not timed again
    missing = [f for f in files if not (root / f).is_file()]
    if missing:
        raise InputError(f"{root / missing[0]}: listed in {root / PLAN} but not there; compile the step again")
    try:
        for f in files:
            target = dest / f
            real_directory(target.parent)
            shutil.copy2(root / f, target)
    except OSError as e:
        raise OutputError(f"cannot copy into {dest}: {e.strerror or e}") from None
    return files


def _inside(root: Path, rel: str) -> bool:
    """Whether `rel` names a place inside `root`: relative, without `..` (a path that leaves and
    comes back, `../DIR/x`, would lead out of a copy of the directory made elsewhere: `pack`),
    and no symbolic link leads out of it."""
    if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        return False
    base = root.resolve()
    return (base / rel).resolve().is_relative_to(base)


def _write(path: Path, data: dict) -> None:
    real_directory(path.parent)
    write_file(path, json.dumps(data, indent=2))
