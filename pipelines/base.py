"""The seam every codegen pipeline implements: build a problem, turn a solution into a config.

A pipeline's problem (`build_problem`, `features`) is IREE-free: it reads only the plain
description in `pipelines.dispatch`, so another compiler can build and enumerate it without
installing IREE. Only its lowering (`to_config`: typed IREE attributes) imports the compiler, and
only when called."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, TypeVar, Union

from constraints import Problem
from pipelines.dispatch import Dispatch
from pipelines.configured import ConfiguredDispatch
from pipelines.parts import ConfigPart, SplitReduction

if TYPE_CHECKING:
    from iree.compiler import ir

KnobValue = Union[int, bool]
P = TypeVar("P", bound=ConfigPart)


@dataclass(frozen=True)
class Config:
    """What a candidate changes: a compilation_info for the root op (or none, to keep the
    compiler's own), and extra iree-compile flags."""

    knobs: Mapping[str, KnobValue]
    compilation_info: str | None  # the attribute's text, as printed by the bindings
    flags: tuple[str, ...] = ()
    summary: str = ""  # a short human label, e.g. "wg 64x256 vec 8x32 k1"
    # What to read back from the configured dispatch to prove the config took effect.
    expect_root_op: str | None = None
    expect_lowering_config: str | None = None
    expect_translation_info: str | None = None
    # Attributes other than the compilation_info the spec sets on the root op, by name (each an
    # attribute's text), and reads back like it: attention's decomposition_config (the lowering
    # configs of its QK and PV matmuls) is one.
    root_attributes: tuple[tuple[str, str], ...] = ()
    # The config goes in at the codegen stage (a @__kernel_config entry, where the dispatch's
    # ops are those the compiler configures) even on targets whose specs are preprocessing specs.
    codegen_spec: bool = False
    # What only some pipelines ask for, one typed part each (pipelines.parts: split-K, a
    # reduction's other ops, a codegen strategy, data tiling, microkernels, the ops after the root).
    parts: tuple[ConfigPart, ...] = ()

    def part(self, kind: type[P]) -> Optional[P]:
        """This config's part of that type, or None."""
        return next((p for p in self.parts if isinstance(p, kind)), None)

    @property
    def split_ways(self) -> int:
        """How many ways the root op's reduction is split (pipelines.parts.SplitReduction; 1: not)."""
        split = self.part(SplitReduction)
        return split.ways if split else 1


def tiled_config(knobs: Mapping[str, KnobValue], lowering: ir.Attribute, translation: ir.Attribute,
                 summary: str, expect_root_op: str | None = None) -> Config:
    """A Config that sets the root op's compilation_info from typed attributes, expecting both
    halves to be read back unchanged from the compiled dispatch."""
    from iree.compiler.dialects import iree_codegen

    with lowering.context:
        info = iree_codegen.CompilationInfoAttr.get(lowering, translation)
    return Config(knobs=dict(knobs), compilation_info=str(info), summary=summary, expect_root_op=expect_root_op,
                  expect_lowering_config=str(lowering), expect_translation_info=str(translation))


class NotInCompilerKnobs(ValueError):
    """Raised by a pipeline's `compiler_knobs` for a config the compiler's emitted knobs cannot
    say (e.g. split-K: the emitted constraints describe the op unsplit)."""


class ProblemHooks:
    """The problem and its space: which dispatches it tunes (or declines, and why), the Z3
    problem of their valid configs, and what the learned search models of a config. IREE-free."""

    name: str = ""
    # Knobs a config the user gives may leave out, with the value that means "not used" (the
    # data-tiled part of a CPU contraction's space, which older config files do not name).
    optional_knobs: Mapping[str, KnobValue] = {}

    def supports(self, dispatch: Dispatch) -> bool:
        """Whether this pipeline can tune the dispatch (kind, target, the compiler's choice)."""
        raise NotImplementedError

    def declines(self, dispatch: Dispatch) -> str | None:
        """Why this pipeline, which tunes dispatches of this kind on this target, cannot tune this
        one (a limit of the compiler, say), or None: what `dispatches` and `tune` say of it."""
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        """The Z3 problem whose solutions are this pipeline's valid configs for the dispatch."""
        raise NotImplementedError

    def features(self, dispatch: Dispatch, solution: Mapping[str, KnobValue]) -> dict[str, float]:
        """A config's derived quantities the learned search models, beyond its knobs (none)."""
        return {}


class LoweringHooks:
    """The lowering: a solution as the typed attributes (and flags) IREE takes, and what a
    config's spec matcher requires of the dispatch it is read back from."""

    # Whether its configs' spec matchers also require the ops between the root and the store
    # (tuner.specs.fused.match_stored_through), so that a model's same-shaped roots with other
    # ops after them are tuned apart, not by one config. The one home of that rule: read where
    # a model's dispatches are grouped (tuner.stages.selection.signature) and where each config
    # gets its pipelines.parts.StoredThrough (tuner.specs.candidates.as_matched).
    matches_ops_after: bool = False

    def to_config(self, dispatch: Dispatch, solution: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        """The typed attributes (and flags) a solution stands for."""
        raise NotImplementedError


class ModelPolicy:
    """Model-wide flags: what a model holding its dispatches is tried with as a whole (tune-model's
    flag stage), and what `tune` asks discovery to form under them."""

    # Flag sets that change every dispatch of a model rather than one (e.g. data tiling): a
    # model's tuning decides them for the whole model, with and without each.
    model_flags: tuple[tuple[str, ...], ...] = ()
    # Those of `model_flags` that form dispatches taking configs of their own (llvm-cpu: data
    # tiling materialized early, the mmt4d): tune-model judges them with the largest tuned first.
    tuned_model_flags: tuple[tuple[str, ...], ...] = ()
    # Knobs whose value sets such a flag: tune-model leaves those configs out (it decides the flag).
    flag_knobs: tuple[str, ...] = ()
    # Every flag set `flags_to_take` may give (what a reused flag decision may hold).
    taking_flags: tuple[tuple[str, ...], ...] = ()
    # Flags under which the compiler turns the dispatch into another op whose configs this
    # pipeline's problem also offers (llvm-cpu contractions: the data-tiled linalg.mmt4d);
    # `tune` has discovery find that op under them (Dispatch.data_tiled). () where none.
    data_tiling_flags: tuple[str, ...] = ()

    def model_flags_for(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """The model-wide flag sets a model holding this dispatch is tried with (`model_flags`,
        and any that only a dispatch like this one calls for)."""
        return self.model_flags

    def tuned_model_flags_for(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """Those of `model_flags_for(dispatch)` judged with the dispatches they form tuned first."""
        return self.tuned_model_flags

    def flags_to_take(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """Model-wide flag sets under which the compiler would form this dispatch, which the
        pipeline declines as it is formed now, into one the pipeline takes (the mma.sync kernel:
        B stored N x K, which the compiler then stores K x N). Where this pipeline tunes a whole
        model, the flag stage tries them on a choice whose dispatches call for them, judged with
        the contractions they form tuned. Each is one of `taking_flags`."""
        return ()


class ConstraintSourceHooks:
    """Where its valid configs come from: its own problem ("native"), IREE's emitted constraints
    ("compiler") or both; the constraint sources of tuner.problem.sources override these, and
    answer every other hook with the pipeline they wrap (`underlying`)."""

    # The pipeline IREE 3.13 emits constraints under ("iree_gpu.TileAndFuse"); None: it emits none.
    compiler_pipeline: str | None = None
    # Where its valid configs come from: "native" (build_problem), "compiler" or "both".
    constraints: str = "native"
    # Whether `admits` rejects some of the configs its space holds (--constraints both).
    filters_configs: bool = False

    def space_points(self, dispatch: Dispatch) -> tuple[list[dict], bool] | None:
        """A space of its own (the configs and whether they are all of them) instead of
        `build_problem`'s; None: it has none (the compiler's constraints have one)."""
        return None

    def admits(self, dispatch: Dispatch, solution: Mapping[str, KnobValue]) -> bool:
        """Whether a config of its space is taken (see `filters_configs`)."""
        return True

    def maps_to_compiler(self, dispatch: Dispatch) -> bool:
        """Whether `compiler_knobs` can say this dispatch's configs in the compiler's knobs."""
        return False

    def compiler_knobs(self, dispatch: Dispatch, solution: Mapping[str, KnobValue]) -> dict[str, object]:
        """A config in the knobs of the compiler's emitted constraints."""
        raise NotInCompilerKnobs(f"{getattr(self, 'name', '')}: the compiler emits no constraints for it")

    @property
    def underlying(self) -> "Pipeline":
        """The codegen pipeline itself (a constraint source: the one it wraps)."""
        return self  # type: ignore[return-value]


class PresentationHooks:
    """How the tuner names it, reports its results and times its dispatches."""

    # Other names `--pipeline` picks it by.
    aliases: tuple[str, ...] = ()
    # A boolean knob that splits its space into two families a user compares, with the name of
    # each (llvm-cpu contractions: data tiling, or the contraction's own tiles): the report says
    # which family won and the best of the other (tuner.report.outputs.family_verdict). None: none.
    families: Optional[tuple[str, str, str]] = None  # (knob, its name when true, when false)

    def untimed_alone(self, dispatch: Dispatch) -> str | None:
        """Why this dispatch cannot be timed alone, from the dispatch benchmark IREE dumps for it
        (GPUs), so that only timing inside the model (CUDA with CUPTI) tunes it; None: it can."""
        return None


# A pipeline's hooks, by concern, each concern a class of its own.
CONCERNS = (ProblemHooks, LoweringHooks, ModelPolicy, ConstraintSourceHooks, PresentationHooks)
# Every hook's name, the concerns' in order (what a constraint source forwards).
HOOKS = tuple(name for concern in CONCERNS for name in vars(concern) if not name.startswith("_"))


class Pipeline(ProblemHooks, LoweringHooks, ModelPolicy, ConstraintSourceHooks, PresentationHooks):
    """One IREE codegen pipeline: every hook the tuner calls, each with its default, by concern
    (CONCERNS: the problem and its space, the lowering, model-wide flags, where its configs come
    from, how it is named and timed). A pipeline subclasses this and defines at least `name`,
    `supports`, `build_problem` and `to_config`; register it in `pipelines.registry`. The
    constraint sources of tuner.problem.sources subclass it too, wrapping a pipeline
    (`underlying` is then the one they wrap)."""


class KindPipeline(Pipeline):
    """A pipeline that says which dispatches are of its kind (`takes`: kind, target, the
    compiler's choice of pipeline) and, of those, why it cannot tune one (`limit`, None: it can):
    it supports a dispatch it takes within its limits, and declines, with the reason, one it
    takes beyond them; of any other it says nothing (another pipeline's)."""

    def takes(self, dispatch: Dispatch) -> bool:
        raise NotImplementedError

    def limit(self, dispatch: Dispatch) -> str | None:
        return None

    def supports(self, dispatch: Dispatch) -> bool:
        return self.takes(dispatch) and self.limit(dispatch) is None

    def declines(self, dispatch: Dispatch) -> str | None:
        return self.limit(dispatch) if self.takes(dispatch) else None


def default_pipeline_is(dispatch: Dispatch, pipeline_id: str) -> bool:
    """Whether the compiler's own config for the dispatch uses this pipeline ("iree_gpu.TileAndFuse",
    "iree_cpu.DoubleTilingExpert"): the typed pipeline attribute as discovery read it."""
    return dispatch.default.pipeline_id == pipeline_id


def check_config(config: Config, configured: ConfiguredDispatch) -> list[str]:
    """Differences between what a config asked for and what the compiler did (empty: it took)."""
    problems = []
    if config.expect_root_op and configured.op_name != config.expect_root_op:
        problems.append(f"root op is {configured.op_name}, expected {config.expect_root_op}")
    if config.expect_lowering_config and configured.lowering_config != config.expect_lowering_config:
        problems.append(
            f"lowering_config is {configured.lowering_config}, expected {config.expect_lowering_config}"
        )
    carried = dict(configured.attributes)
    for name, text in config.root_attributes:
        if carried.get(name) != text:
            problems.append(f"{name} is {carried.get(name) or 'unset'}, expected {text}")
    for part in config.parts:
        problems.extend(part.problems(configured))
    if config.expect_translation_info and configured.translation_info != config.expect_translation_info:
        problems.append(
            f"translation_info is {configured.translation_info}, expected {config.expect_translation_info}"
        )
    return problems
