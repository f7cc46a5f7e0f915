"""The stage interface: what a stage of model tuning reads and leaves behind, and the client that
runs a list of stages over a model.

A stage is anything with a `name` and `run(state, env) -> state`. The state is plain data that
flows from stage to stage: the flags chosen for the model, what each dispatch's tuning found, the
dispatch configs kept in the merged spec, and the model-level figure. The environment is what
every stage may use and none owns: the model, its target, the run's directory, the result store,
the evaluation settings, how to time a model. A client defines its own stages (its own compile
or benchmark commands) and mixes them with the built-in ones (tuner.stages.builtin)."""

from __future__ import annotations

import time

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

import numpy as np
from iree.compiler import ir

from tuner.discovery.program import Program, discover_program
from tuner.profiling.profile import Profile
from tuner.rewrite.parsed import ParsedProgram
from tuner.core.settings import EvalSettings
from tuner.stages.ledger import DISCOVERY, Ledger, part_text
from tuner.stages.model_timing import ModelBenchmark, iree_benchmark
from tuner.stages.time_budget import TimeBudget
from tuner.stages.variants import BuiltVariant, SpecPart
from tuner.targets import Target
from tuner.discovery.workload import Workload
from tuner.core.built import Progress  # noqa: F401 (the one progress callback type; theirs)


MODEL_INPUTS = "model-inputs"  # DIR/model-inputs/: the inputs every build of the model runs on

@dataclass(frozen=True)
class DispatchOutcome:
    """What became of one dispatch of the model."""

    name: str
    shape: str
    share: Optional[float]  # of the model's measured dispatch time (None: not measured)
    status: str  # "tuned", "no winner", "not tuned: WHY", then "kept" / "dropped: WHY" after the model stage
    default_ms: Optional[float] = None  # the default as its tuning timed it (`timed`)
    tuned_ms: Optional[float] = None
    speedup: Optional[float] = None  # paired, from the dispatch's tuning
    part: Optional[SpecPart] = None  # the winning config, if any
    also_covers: tuple[str, ...] = ()  # other dispatches of the same shape the matcher covers
    model_speedup: Optional[float] = None  # the model with this part against without it (paired)
    # Its time per call of the model in the profile (the alike dispatches it covers included).
    profile_ms: Optional[float] = None
    # How many times one call of the model runs it (and the alike dispatches): profile_ms is the
    # sum of that many runs, while its tuning's default_ms and tuned_ms are one run's.
    calls: Optional[int] = None
    # What its tuning's default_ms and tuned_ms are times of: "dispatch" (its kernels, or the
    # dispatch alone) or "model call" (the whole entry function, as on a CPU).
    timed: str = ""
    reused: bool = False  # its finished tuning of an earlier run was read back, not searched again
    # Untuned, and kept with the config of this tuned dispatch's winner (tuner.stages.carry_over).
    carried_from: str = ""

    @property
    def expected_gain(self) -> float:
        """The share of the model's time this dispatch's winner should save."""
        if not self.share or not self.speedup or self.speedup <= 1.0:
            return 0.0
        return self.share * (1.0 - 1.0 / self.speedup)

    def to_json(self) -> dict:
        return {"name": self.name, "shape": self.shape, "share": self.share, "status": self.status,
                "default_ms": self.default_ms, "tuned_ms": self.tuned_ms, "speedup": self.speedup,
                "config": self.part.label if self.part else None, "also_covers": list(self.also_covers),
                "model_speedup": self.model_speedup, "profile_ms": self.profile_ms, "calls": self.calls,
                "timed": self.timed, **({"carried_from": self.carried_from} if self.carried_from else {})}


@dataclass(frozen=True)
class ModelFigure:
    """The model with the result against the default, timed side by side."""

    default_ms: float
    tuned_ms: float
    speedup: float  # median of per-round ratios
    lower: float  # the ratio three rounds of four reach
    rounds: int
    relative_error: Optional[float]
    # Where the median lies (comparison.Paired.interval: low, high, coverage, rounds); None with
    # fewer than 2 rounds.
    interval: Optional[dict] = None
    # Where the model-wide choices alone (the compiler's configs) were timed in the same rounds:
    # their median ratio to the default, and the tuned model's over them (per round).
    choices_speedup: Optional[float] = None
    configs_speedup: Optional[float] = None
    # How much slower the default ran in these rounds than at its quietest earlier in the run
    # (comparison.model_load_change); None where it did not run beyond the noise slower.
    load_change: Optional[float] = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ModelState:
    """What the stages have found so far; each stage returns an updated copy."""

    flags: tuple[str, ...] = ()  # model-wide flags chosen
    # The program rewrites chosen (tuner.rewrite) and the rewritten program's file they wrote
    # (None: the model as given): what later stages discover, tune and build. (A `Program` is
    # what discovery reads from such a file: StageEnv.program.)
    rewrites: tuple[str, ...] = ()
    source: Optional[Path] = None
    # Configs the chosen flags need to build at all (tuner.stages.repair): in every later build
    # and in the tuned model's spec.
    pinned: tuple[SpecPart, ...] = ()
    flag_trials: dict = field(default_factory=dict)  # flag set -> paired speedup over the default
    dispatches: tuple[DispatchOutcome, ...] = ()
    kept: tuple[SpecPart, ...] = ()  # what the merged spec holds
    figure: Optional[ModelFigure] = None
    verdict: str = ""
    notes: tuple[str, ...] = ()
    stage_seconds: dict = field(default_factory=dict)  # each stage's wall seconds in this run, by name
    # each stage's work in this run, by name: kind -> (count, seconds) (tuner.stages.ledger)
    stage_work: dict = field(default_factory=dict)

    def note(self, text: str) -> "ModelState":
        return replace(self, notes=(*self.notes, text))

    def source_of(self, model: Path) -> Path:
        """The program the tuned model is built from: the rewrite chosen, else `model`."""
        return self.source or model


@dataclass
class RunCache:
    """What a tune-model run builds, finds or decides once and reuses across its stages, each kind
    of value in a field of its own, keyed by what defines it."""

    # Whole-model builds, by flags, program and spec parts (tuner.stages.builtin.build_once).
    builds: dict[tuple, BuiltVariant] = field(default_factory=dict)
    # What a model-wide choice's program forms under its flags (its dispatches): by the program
    # and the flags, whichever stage asks first (`discovered_program`).
    programs: dict[tuple[Path, tuple[str, ...]], Program] = field(default_factory=dict)
    # The flag stage's tuned parts of a choice: by its directory name, flags and tuning budget.
    choice_parts: dict[tuple[str, tuple[str, ...], int], tuple[SpecPart, ...]] = field(default_factory=dict)
    # A formed dispatch's tuning and the choice that made it: by what its spec's matcher sees, the
    # codegen flags it compiles under and the budget (tuner.stages.flags, FlagStage._tuned_parts).
    formed_tunings: dict[tuple, tuple[DispatchOutcome, str]] = field(default_factory=dict)
    # Where a reference build's result is off the host's: by the reference's name.
    reference_checks: dict[str, str] = field(default_factory=dict)
    # Why a model-wide choice built with the compiler's configs computes another result than the
    # default's ("" where it does not): by the default's and the build's variant names.
    choice_numerics: dict[tuple[str, str], str] = field(default_factory=dict)
    # A model-wide choice that tunes what it forms, timed with the compiler's configs for it
    # against what it is judged against first: its speedup where it beat that side by side (it is
    # then judged so, nothing tuned before), None where it did not; by "LABEL over REFERENCE"
    # (tuner.stages.untuned.untuned_key).
    untuned_gains: dict[str, Optional[float]] = field(default_factory=dict)
    # The model's program parsed once for the rewrites (tuner.stages.flag_options.rewrite_changes).
    parsed: Optional[ParsedProgram] = None
    # What a rewrite changes in the model (empty: nothing), by the rewrite's name.
    changes: dict[str, list[str]] = field(default_factory=dict)
    # A rewrite's program, once written (None: it finds nothing to rewrite), by the rewrite's name.
    rewritten: dict[str, Optional[Path]] = field(default_factory=dict)
    # The model's result on this host (llvm-cpu), once a run asked for it: (result,), the result
    # None where none could be had (tuner.stages.host_reference).
    host_result: Optional[tuple[Optional[np.ndarray]]] = None


@dataclass
class StageEnv:
    """What every stage may use: the model and where the run writes."""

    model: Path  # the program iree-compile takes (an ONNX model's import, say)
    target: Target
    output_dir: Path
    ctx: ir.Context
    program: Program  # discovery under the default flags
    workload: Workload  # the model's entry function, what a model-level timing runs
    settings: EvalSettings = field(default_factory=EvalSettings)
    store_path: Optional[Path] = None
    devices: Sequence[str] = ()
    timer: ModelBenchmark = iree_benchmark
    progress: Optional[Progress] = None
    say: Callable[[str], None] = lambda text: None  # one line for the user
    profile: Optional[Profile] = None  # the model's dispatch times under the default flags
    rounds: int = 4  # model-level interleaved rounds
    cache: RunCache = field(default_factory=RunCache)  # what the run built, found or decided once
    # The default build's timings in this run's comparisons, in order (ms): its quiet level, which
    # the last comparison's is judged against (a claim made under load says so).
    default_ms: list = field(default_factory=list)
    # How dispatch candidates are evaluated (tuner.evaluation.evaluator): "auto", or "ray" to compile and time
    # them on a Ray cluster, every dispatch at once.
    strategy: str = "auto"
    dynamic_size: Optional[int] = None  # for each dynamic dimension of the entry's arguments (None: the hints')
    # The whole run's time budget (tuner.stages.time_budget), or None: no limit.
    budget: Optional[TimeBudget] = None
    # Where the run's time goes, by kind of work (whole-model builds, timings, ...).
    ledger: Ledger = field(default_factory=Ledger)
    _inputs: Optional[tuple[Path, ...]] = field(default=None, init=False, repr=False)

    @property
    def device(self) -> str:
        return self.devices[0] if self.devices else self.target.device

    def inputs(self) -> tuple[Path, ...]:
        """The model's inputs, written once into the run's directory (every comparison reuses them)."""
        if self._inputs is None:
            self._inputs = tuple(self.workload.write_inputs(self.output_dir / MODEL_INPUTS))
        return self._inputs


def parsed_model(env: StageEnv) -> ParsedProgram:
    """The model's program parsed once a run (`RunCache.parsed`), for the rewrites to copy."""
    if env.cache.parsed is None:
        env.cache.parsed = ParsedProgram(env.model)
    return env.cache.parsed


def discovered_program(env: StageEnv, source: Path, flags: tuple[str, ...]) -> Program:
    """What `source` forms under the model-wide `flags`, discovered once a run: the flag stage's
    choices, the dispatch stage's chosen one and the merge's carry-over ask for the same program
    (Falcon-7B's layer on the H200: the merge's carry-over read the chosen program again, 12 s of
    a 261 s run, after the dispatch stage had read it)."""
    key = (source, tuple(flags))
    if key not in env.cache.programs:
        with env.ledger.timed(DISCOVERY):
            env.cache.programs[key] = discover_program(source, env.target, env.ctx, tuple(flags))
    return env.cache.programs[key]


class Stage(Protocol):
    """One step of model tuning: reads the state, does its work (compiles, benchmarks), and
    returns what it keeps."""

    name: str

    def run(self, state: ModelState, env: StageEnv) -> ModelState: ...


def run_stages(stages: Sequence[Stage], env: StageEnv, state: Optional[ModelState] = None) -> ModelState:
    """The client: each stage in turn over the model, the state flowing from one to the next."""
    state = state or ModelState()
    for stage in stages:
        env.say(f"stage {stage.name}")
        start, mark = time.monotonic(), env.ledger.mark()
        state = stage.run(state, env)
        seconds, work = time.monotonic() - start, env.ledger.since(mark)
        said = part_text(work, seconds)
        env.say(f"stage {stage.name}: {seconds:.0f} s" + (f" ({said})" if said else ""))  # where a run's time went
        state = replace(state, stage_seconds={**state.stage_seconds, stage.name: round(seconds, 1)},
                        stage_work={**state.stage_work, stage.name: work})
    return state
