"""Where a dispatch's valid configs come from (`--constraints`):

- `native`: the pipeline's own problem (pipelines/), as before;
- `compiler`: the problem IREE emits for the root op (tuner.problem.compiler), solved with Z3,
  each solution turned into a compilation_info by the compiler's materializer. Its knobs are the
  compiler's (`wg_0`, `sg_0`, `red_2`, `mma_idx`, ...); it has no preferences, so `--search
  preference` takes its solutions in the solver's order;
- `both`: the native space (its knob names, preferences, features and configs) less the configs
  the compiler's constraints reject.

Each wraps the pipeline in a `Pipeline` of its own (`underlying` is the one it wraps), so the search,
the candidates and the evaluators do not know which source they read."""

from __future__ import annotations

import inspect

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from iree.compiler import ir

from pipelines import Config, Dispatch, Pipeline
from pipelines.base import HOOKS  # every hook the tuner calls on a pipeline, by concern
from tuner.problem.compiler import EmittedProblem, emitted_problems, materialized_config, problem_for
from tuner.errors import InputError
from tuner.targets import Target

SOURCES = ("native", "compiler", "both")


def _forwarding(hook: str):
    """`hook` of the wrapped pipeline: a method called on it, or its value."""
    if callable(inspect.getattr_static(Pipeline, hook)):
        def method(self, *args, **kwargs):
            return getattr(self.base, hook)(*args, **kwargs)
        method.__name__ = hook
        return method
    return property(lambda self: getattr(self.base, hook))




@dataclass
class _Wrapping(Pipeline):
    """A constraint source: the pipeline it wraps (`base`, its `underlying`) and the compiler's
    emitted problem for the dispatch. A source answers the hooks its class (or this one)
    defines; every other hook of Pipeline is the wrapped pipeline's, forwarded when the class is
    made (`__init_subclass__`), so that no caller has to ask `.underlying` and a hook added to
    Pipeline cannot be missed."""

    base: Pipeline
    problem: EmittedProblem

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        own = {name for klass in cls.__mro__ if issubclass(klass, _Wrapping) for name in vars(klass)}
        for hook in HOOKS:
            if hook not in own:
                setattr(cls, hook, _forwarding(hook))

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def underlying(self) -> Pipeline:
        return self.base


@dataclass
class CompilerSource(_Wrapping):
    """A pipeline whose space is the compiler's emitted problem (up to `limit` solutions or
    `seconds` of solving: the solver finds 70-200 configs a second, BENCHMARKS.md). Its knobs
    are the compiler's: it answers what reads knobs itself (no features, no flag knobs, no
    optional knobs or families, every config of its space taken); what concerns the dispatch or
    the model (supports, declines, untimed_alone, model-wide flags, matchers) is the wrapped
    pipeline's."""

    limit: int = 1000
    seconds: float = 30.0
    constraints = "compiler"
    filters_configs = False
    flag_knobs = ()
    optional_knobs = {}  # noqa: RUF012 (a class attribute, read only)
    families = None

    def space_points(self, dispatch: Dispatch) -> tuple[list[dict], bool]:
        """The compiler's valid configs, and whether they are all of them."""
        points = list(self.problem.solutions(self.limit, self.seconds))
        return points, len(points) < self.limit and not self.problem.timed_out

    def build_problem(self, dispatch: Dispatch):
        raise NotImplementedError("the compiler's constraints are solved as they were emitted (space_points)")

    def to_config(self, dispatch: Dispatch, knobs: Mapping[str, int], ctx: ir.Context) -> Config:
        return materialized_config(self.problem, knobs, ctx)

    def features(self, dispatch: Dispatch, knobs: Mapping) -> dict[str, float]:
        return {}

    def admits(self, dispatch: Dispatch, knobs: Mapping) -> bool:
        return True

    def maps_to_compiler(self, dispatch: Dispatch) -> bool:
        return False  # nothing to map: its configs are the compiler's knobs

    def compiler_knobs(self, dispatch: Dispatch, knobs: Mapping) -> dict[str, object]:
        from pipelines.base import NotInCompilerKnobs

        raise NotInCompilerKnobs(f"{self.name}: its configs are the compiler's own knobs")


@dataclass
class BothSource(_Wrapping):
    """The native pipeline less the configs the compiler's constraints reject: its problem,
    knobs, features and configs, with `admits` saying which of them the compiler takes; every
    other hook is the native pipeline's."""

    constraints = "both"
    filters_configs = True

    def admits(self, dispatch: Dispatch, knobs: Mapping) -> bool:
        """Whether the compiler's constraints admit the config; one they cannot say (split-K)
        is outside the intersection."""
        from pipelines.base import NotInCompilerKnobs
        from tuner.problem.crosscheck import compiler_assignment

        try:
            mapped = compiler_assignment(self.base, dispatch, knobs, self.problem, self.problem.intrinsic_indices())
        except NotInCompilerKnobs:
            return False
        return self.problem.admits(mapped)


def with_constraints(source: str, pipeline: Pipeline, dispatch: Dispatch, input_path: Path, target: Target,
                     ctx: ir.Context, flags: tuple[str, ...] = (), budget: int = 50) -> Pipeline:
    """The pipeline reading its valid configs from `source`. Where the compiler emits no
    constraints for it (llvm-cpu, attention): `compiler` is a one-line error, `both` is native."""
    if source not in SOURCES:
        raise InputError(f"--constraints must be one of {', '.join(SOURCES)}, not {source!r}")
    if source == "native":
        return pipeline
    compiler_pipeline = pipeline.compiler_pipeline
    if source == "both" and compiler_pipeline is not None and not pipeline.maps_to_compiler(dispatch):
        compiler_pipeline = None  # its configs cannot be put in the compiler's knobs: both is native
    if compiler_pipeline is None:
        if source == "both":
            return pipeline
        raise InputError(f"--constraints compiler: IREE 3.13 emits no constraints for {pipeline.name} "
                         f"({dispatch.kind.value} on {target.name}); use native or both")
    try:
        problem = problem_for(emitted_problems(input_path, target, ctx, flags), dispatch.name, compiler_pipeline,
                              target)
    except InputError:
        if source == "both":
            return pipeline
        raise
    if source == "compiler":
        return CompilerSource(pipeline, problem, limit=min(CompilerSource.limit, max(200, 20 * budget)))
    return BothSource(pipeline, problem)

